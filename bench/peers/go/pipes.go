// SPDX-License-Identifier: MIT

package main

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// pipes --style fiber: P pipes made with os.Pipe(), which the Go runtime sets
// non-blocking and registers with its netpoller (edge-triggered epoll), and one
// goroutine per pipe looping
//
//	{ write 1 byte; wait until readable; sleep D µs if D > 0; read 1 byte }
//
// until a shared budget of M messages has been started.  As an idiomatic Go
// user writes it, "wait until readable" and "read" are one (*os.File).Read: it
// tries the read(2) first and parks the goroutine on the netpoller only on
// EAGAIN (the fiber style of BENCHMARKS.md allows exactly this).  The byte is
// therefore taken out of the pipe before the D µs sleep rather than after it;
// the work per message is the same either way (one write(2), one read(2), one
// timer when D > 0, strictly in sequence per pipe), and os.File offers no way
// to wait for readability without reading short of an extra system call per
// message.  Writes never find the pipe full (at most one byte is in flight).
//
// The goroutines are started inside the timed span (they are part of the fiber
// style); the pipes are made before it.  Each goroutine counts what it
// received; the sum must equal M.
func benchPipes(args []string) int {
	o := parseOpts(args, "pipes", "messages", "delay-us", "style", "backend")
	p := int(o.long("pipes", 1000))
	m := o.long("messages", 1000000)
	d := o.long("delay-us", 0)
	style := o.str("style", "fiber")
	if style != "fiber" {
		usageExit("pipes: only --style fiber is implemented by the Go peer")
	}
	if b := o.str("backend", "epoll"); b != "epoll" {
		usageExit("pipes: --backend: the Go netpoller always uses epoll")
	}
	if p < 1 || m < 0 || d < 0 {
		usageExit("pipes: need --pipes >= 1, --messages >= 0, --delay-us >= 0")
	}
	delay := time.Duration(d) * time.Microsecond

	rs := make([]*os.File, p)
	ws := make([]*os.File, p)
	for i := 0; i < p; i++ {
		r, w, err := os.Pipe()
		if err != nil {
			die("pipe %d of %d: %v", i, p, err)
		}
		rs[i], ws[i] = r, w
	}

	var started atomic.Int64 // messages started so far (the shared budget)
	received := make([]int64, p)
	var bad atomic.Int64
	var wg sync.WaitGroup
	wg.Add(p)

	var sp span
	sp.begin()
	for i := 0; i < p; i++ {
		r, w, cnt := rs[i], ws[i], &received[i]
		go func() {
			defer wg.Done()
			out := []byte{'x'}
			in := make([]byte, 1)
			n := int64(0)
			for started.Add(1) <= m {
				if k, err := w.Write(out); k != 1 || err != nil {
					bad.Add(1)
					fmt.Fprintf(os.Stderr, "bench-go pipes: write: %d %v\n", k, err)
					break
				}
				k, err := r.Read(in) // parks on the netpoller only on EAGAIN
				if k != 1 || err != nil || in[0] != 'x' {
					bad.Add(1)
					fmt.Fprintf(os.Stderr, "bench-go pipes: read: %d %v\n", k, err)
					break
				}
				if delay > 0 {
					time.Sleep(delay)
				}
				n++
			}
			*cnt = n
		}()
	}
	wg.Wait()
	sp.end()

	total, most := int64(0), int64(0)
	for _, n := range received {
		total += n
		most = max(most, n)
	}
	fmt.Fprintf(os.Stderr, "bench-go pipes: most messages through one pipe: %d of %d\n", most, m)
	if bad.Load() != 0 || total != m {
		fail("pipes", "received %d messages, expected %d (%d errors)", total, m, bad.Load())
	}
	for i := 0; i < p; i++ {
		rs[i].Close()
		ws[i].Close()
	}
	result("pipes", &sp, fmt.Sprintf("pipes=%d messages=%d delay_us=%d msgs_per_s=%.0f cpu_us_per_msg=%.4f",
		p, m, d, float64(m)/sp.wall, (sp.user+sp.sys)*1e6/float64(m)))
	return 0
}
