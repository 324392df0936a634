// SPDX-License-Identifier: MIT

module treadle/bench/peers/go

go 1.22
