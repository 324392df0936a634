// SPDX-License-Identifier: MIT

module treadle/bench/peers/go-http

go 1.22
