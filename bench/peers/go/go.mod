module treadle/bench/peers/go

go 1.22
