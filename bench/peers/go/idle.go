// SPDX-License-Identifier: MIT

package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"time"
)

// idle: F goroutines, each blocked for good on a receive from its own
// unbuffered channel (nothing is ever sent).  The channels are made as the
// goroutines are started, after the "before" reading, so their memory (an
// hchan of ~96 bytes each) counts, as a per-fiber channel does in treadle's;
// they are kept in a slice so that every blocked goroutine stays reachable
// from main (8 bytes each, counted too).
//
// Each goroutine signals a WaitGroup just before its receive; once all F have
// signalled, a settle of 200 ms lets the last ones park.  Before each VmRSS
// reading the heap is garbage-collected and its free pages handed back to the
// kernel (debug.FreeOSMemory), so garbage does not count either way.
//
// bytes_per_fiber = (VmRSS with all F blocked - VmRSS before) * 1024 / F.
// wall_s/user_s/sys_s cover starting the F goroutines until all have signalled.
func benchIdle(args []string) int {
	o := parseOpts(args, "fibers")
	f := int(o.long("fibers", 100000))
	if f < 1 {
		usageExit("idle: need --fibers >= 1")
	}

	baseGoroutines := runtime.NumGoroutine()
	debug.FreeOSMemory() // runs a GC first
	before := rssKB()

	var ready sync.WaitGroup
	ready.Add(f)
	var sp span
	sp.begin()
	chans := make([]chan struct{}, f)
	for i := range chans {
		ch := make(chan struct{})
		chans[i] = ch
		go func() {
			ready.Done()
			<-ch // blocked for good
		}()
	}
	ready.Wait()
	sp.end()

	time.Sleep(200 * time.Millisecond) // settle: the last goroutines reach their receive
	debug.FreeOSMemory()
	after := rssKB()

	if got := runtime.NumGoroutine() - baseGoroutines; got != f {
		fail("idle", "%d goroutines alive, expected %d", got, f)
	}
	if before < 0 || after < 0 {
		fail("idle", "cannot read VmRSS")
	}
	bytesPerFiber := float64(after-before) * 1024 / float64(f)
	result("idle", &sp, fmt.Sprintf("fibers=%d rss_before_kb=%d rss_after_kb=%d bytes_per_fiber=%.0f",
		f, before, after, bytesPerFiber))
	runtime.KeepAlive(chans)
	return 0
}
