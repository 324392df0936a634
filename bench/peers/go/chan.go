// SPDX-License-Identifier: MIT

package main

import (
	"fmt"
	"time"
)

// chan: two goroutines pass a value back and forth over ONE unbuffered channel.
// A hop is one send matched by one receive.  main puts the value 0 in play (not
// a hop); a goroutine that receives v stops the run if v == T and otherwise
// sends v+1: that send and the other goroutine's receive of it are one hop.
// So exactly T hops are made, which the final value checks.  One channel is
// enough in Go: a goroutine is never sending and receiving at once, so the only
// receiver waiting when one sends is the other goroutine.
func benchChan(args []string) int {
	o := parseOpts(args, "hops")
	hops := o.long("hops", 10000000)
	if hops < 0 {
		usageExit("chan: need --hops >= 0")
	}

	ch := make(chan int64)
	done := make(chan int64, 1)
	for i := 0; i < 2; i++ {
		go func() {
			for {
				v := <-ch
				if v == hops {
					done <- v
					return
				}
				ch <- v + 1
			}
		}()
	}
	time.Sleep(20 * time.Millisecond) // both goroutines waiting in their receive

	var sp span
	sp.begin()
	ch <- 0
	final := <-done
	sp.end()

	if final != hops {
		fail("chan", "final value %d, expected %d", final, hops)
	}
	nsPerHop, cpuNsPerHop := 0.0, 0.0
	if hops > 0 {
		nsPerHop = sp.wall * 1e9 / float64(hops)
		cpuNsPerHop = (sp.user + sp.sys) * 1e9 / float64(hops)
	}
	result("chan", &sp, fmt.Sprintf("hops=%d ns_per_hop=%.2f cpu_ns_per_hop=%.2f", hops, nsPerHop, cpuNsPerHop))
	return 0
}
