// SPDX-License-Identifier: MIT

package main

import (
	"fmt"
)

// xchan: a goroutine sends 1..T over a buffered channel of 1024 to another,
// which sums them and checks the sum (treadle: two loops on two threads; Go:
// run with GOMAXPROCS=2 so that both may run at once).
func benchXchan(args []string) int {
	o := parseOpts(args, "hops")
	hops := o.long("hops", 10000000)
	if hops < 1 {
		usageExit("xchan: need --hops >= 1")
	}
	ch := make(chan int64, 1024)
	done := make(chan int64)
	var sp span
	sp.begin()
	go func() {
		var sum int64
		for v := range ch {
			sum += v
		}
		done <- sum
	}()
	go func() {
		for i := int64(1); i <= hops; i++ {
			ch <- i
		}
		close(ch)
	}()
	sum := <-done
	sp.end()
	if sum != hops*(hops+1)/2 {
		fail("xchan", "sum %d, expected %d", sum, hops*(hops+1)/2)
	}
	result("xchan", &sp, fmt.Sprintf("hops=%d ns_per_msg=%.2f msgs_per_s=%.0f cpu_ns_per_msg=%.2f",
		hops, sp.wall*1e9/float64(hops), float64(hops)/sp.wall,
		(sp.user+sp.sys)*1e9/float64(hops)))
	return 0
}

// xping: two goroutines pass one value back and forth over two unbuffered
// channels, T round trips.
func benchXping(args []string) int {
	o := parseOpts(args, "hops")
	hops := o.long("hops", 1000000)
	if hops < 1 {
		usageExit("xping: need --hops >= 1")
	}
	there, back := make(chan int64), make(chan int64)
	go func() {
		for v := range there {
			back <- v
		}
	}()
	var sp span
	sp.begin()
	for i := int64(0); i < hops; i++ {
		there <- i
		if v := <-back; v != i {
			fail("xping", "got %d, expected %d", v, i)
		}
	}
	sp.end()
	close(there)
	result("xping", &sp, fmt.Sprintf("hops=%d ns_per_round_trip=%.1f cpu_ns_per_round_trip=%.1f",
		hops, sp.wall*1e9/float64(hops), (sp.user+sp.sys)*1e9/float64(hops)))
	return 0
}
