// SPDX-License-Identifier: MIT

package main

import (
	"fmt"
	"time"
)

// ring: N goroutines in a ring pass a token T times (the thread-ring of the
// Benchmarks Game).  main hands the token, holding the count T, to goroutine 0
// (not a hop).  A goroutine that receives count v stops the run if v == 0 and
// otherwise passes v-1 to its successor: that pass is one hop.  So exactly T
// hops are made and the run ends at goroutine T mod N, which is checked.
//
// --via chan: an unbuffered channel between neighbours carrying the count, the
// Benchmarks Game form.
//
// --via wake: each goroutine parks until its predecessor wakes it, and the count
// lives in a variable shared by the ring (only the token holder touches it; the
// channel operation that hands over the token orders the accesses).  Go has no
// public park/unpark of a specific goroutine; the cheapest honest "wake this
// goroutine" is a per-goroutine channel of capacity 1 carrying no data, used as
// a one-permit semaphore: the waker's send never blocks (as a wake must not),
// a wake that comes before the park is not lost, and when the target is
// already parked in the receive the runtime hands over directly to it and
// makes it runnable, without touching the buffer.  (Measured:
// as cheap as an unbuffered channel or a sync.Cond+flag per goroutine, within
// noise, and ~1.6x cheaper than a locked sync.Mutex per goroutine unlocked by
// the predecessor.)
func benchRing(args []string) int {
	o := parseOpts(args, "threads", "hops", "via")
	n := int(o.long("threads", 503))
	hops := o.long("hops", 10000000)
	via := o.str("via", "wake")
	if n < 1 || hops < 0 {
		usageExit("ring: need --threads >= 1 and --hops >= 0")
	}

	finisher := make(chan int, 1)
	var sp span
	switch via {
	case "chan":
		chans := make([]chan int64, n)
		for i := range chans {
			chans[i] = make(chan int64)
		}
		for i := 0; i < n; i++ {
			in, out, id := chans[i], chans[(i+1)%n], i
			go func() {
				for {
					v := <-in
					if v == 0 {
						finisher <- id
						return
					}
					out <- v - 1
				}
			}()
		}
		time.Sleep(20 * time.Millisecond) // let every goroutine reach its receive
		sp.begin()
		chans[0] <- hops
	case "wake":
		var token int64
		wakes := make([]chan struct{}, n)
		for i := range wakes {
			wakes[i] = make(chan struct{}, 1)
		}
		for i := 0; i < n; i++ {
			me, next, id := wakes[i], wakes[(i+1)%n], i
			go func() {
				for {
					<-me // park until woken
					if token == 0 {
						finisher <- id
						return
					}
					token--
					next <- struct{}{} // wake the successor
				}
			}()
		}
		time.Sleep(20 * time.Millisecond)
		sp.begin()
		token = hops
		wakes[0] <- struct{}{}
	default:
		usageExit("ring: --via must be wake or chan")
	}
	last := <-finisher
	sp.end()

	if want := int(hops % int64(n)); last != want {
		fail("ring", "token stopped at goroutine %d, expected %d", last, want)
	}
	nsPerHop, cpuNsPerHop := 0.0, 0.0
	if hops > 0 {
		nsPerHop = sp.wall * 1e9 / float64(hops)
		cpuNsPerHop = (sp.user + sp.sys) * 1e9 / float64(hops)
	}
	result("ring", &sp, fmt.Sprintf("threads=%d hops=%d via=%s ns_per_hop=%.2f cpu_ns_per_hop=%.2f",
		n, hops, via, nsPerHop, cpuNsPerHop))
	return 0
}
