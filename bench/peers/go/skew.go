// SPDX-License-Identifier: MIT

package main

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// skew: one goroutine spawns N goroutines, each running I rounds of
// xorshift64 from seed i|1 and adding its x to a shared atomic sum; the
// spawner waits for all.  Go's scheduler spreads them over GOMAXPROCS Ps
// (run with GOMAXPROCS=1 and 2).
func xorshift(seed uint64, iters int64) uint64 {
	x := seed
	for r := int64(0); r < iters; r++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	return x
}

func benchSkew(args []string) int {
	o := parseOpts(args, "tasks", "iters")
	tasks := o.long("tasks", 20000)
	iters := o.long("iters", 100000)
	if tasks < 1 || iters < 1 {
		usageExit("skew: need --tasks >= 1 and --iters >= 1")
	}
	var sum atomic.Uint64
	var wg sync.WaitGroup
	var sp span
	sp.begin()
	done := make(chan struct{})
	go func() { // the one spawner, as treadle's fiber on loop 0
		for i := int64(0); i < tasks; i++ {
			wg.Add(1)
			go func(i int64) {
				sum.Add(xorshift(uint64(i)|1, iters))
				wg.Done()
			}(i)
		}
		wg.Wait()
		close(done)
	}()
	<-done
	sp.end()
	var want uint64
	for i := int64(0); i < tasks; i++ {
		want += xorshift(uint64(i)|1, iters)
	}
	if sum.Load() != want {
		fail("skew", "sum %d, expected %d", sum.Load(), want)
	}
	result("skew", &sp, fmt.Sprintf("tasks=%d iters=%d sum=%d tasks_per_s=%.0f cpu_us_per_task=%.2f",
		tasks, iters, sum.Load(), float64(tasks)/sp.wall, (sp.user+sp.sys)*1e6/float64(tasks)))
	return 0
}
