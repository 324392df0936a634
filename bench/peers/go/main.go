// SPDX-License-Identifier: MIT

// bench-go: the Go peer of treadle-bench for the fiber-level workloads of
// docs/BENCHMARKS.md (ring, chan, idle, pipes --style fiber, fs, fsopen, skew), with the
// same command line and the same RESULT line as the C driver.
//
//	bench-go ring  --threads 503 --hops T [--via wake|chan]
//	bench-go chan  --hops T
//	bench-go idle  --fibers F
//	bench-go pipes --pipes P --messages M --delay-us D [--style fiber]
//	bench-go fs    --reads N --fibers C --file-mib S [--dir D]
//	bench-go fsopen --opens N --fibers C --files F [--dir D]
//	bench-go skew  --tasks N --iters I
//	bench-go echo-server [--listen ADDR]   (prints PORT n, serves until stdin ends)
//
// impl is always "go"; the GOMAXPROCS in force is reported as the key
// gomaxprocs=N (run it with GOMAXPROCS=1 for the single-threaded figure).
// Everything but the RESULT line goes to stderr.  A run that fails its own
// correctness check exits 1 without printing a RESULT line.
package main

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// span brackets the work: monotonic wall time (time.Now carries a monotonic
// reading and Sub uses it) and getrusage(RUSAGE_SELF) deltas, which cover
// every thread of the process, the Go runtime's own (GC, sysmon) included.
type span struct {
	t0              time.Time
	ru0             syscall.Rusage
	wall, user, sys float64
}

func tvSeconds(tv syscall.Timeval) float64 {
	return float64(tv.Sec) + float64(tv.Usec)/1e6
}

func (s *span) begin() {
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &s.ru0); err != nil {
		die("getrusage: %v", err)
	}
	s.t0 = time.Now()
}

func (s *span) end() {
	s.wall = time.Since(s.t0).Seconds()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		die("getrusage: %v", err)
	}
	s.user = tvSeconds(ru.Utime) - tvSeconds(s.ru0.Utime)
	s.sys = tvSeconds(ru.Stime) - tvSeconds(s.ru0.Stime)
}

// procStatusKB returns a "Vm...:" field of /proc/self/status in KiB, or -1.
func procStatusKB(field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, field+":") {
			fs := strings.Fields(line[len(field)+1:])
			if len(fs) > 0 {
				if v, err := strconv.ParseInt(fs[0], 10, 64); err == nil {
					return v
				}
			}
		}
	}
	return -1
}

func peakRSSKB() int64 { return procStatusKB("VmHWM") }
func rssKB() int64     { return procStatusKB("VmRSS") }

// result prints the one RESULT line on stdout.  keys is "k=v k=v ...".
func result(bench string, s *span, keys string) {
	fmt.Printf("RESULT impl=go bench=%s gomaxprocs=%d %s wall_s=%.6f user_s=%.6f sys_s=%.6f peak_rss_kb=%d\n",
		bench, runtime.GOMAXPROCS(0), keys, s.wall, s.user, s.sys, peakRSSKB())
}

func die(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "bench-go: "+format+"\n", a...)
	os.Exit(1)
}

// fail reports a failed correctness check: exit 1, no RESULT line.
func fail(bench, format string, a ...any) {
	fmt.Fprintf(os.Stderr, "bench-go %s: CHECK FAILED: "+format+"\n", append([]any{bench}, a...)...)
	os.Exit(1)
}

// opts holds "--name value" pairs; a malformed command line exits 2, as the C
// driver's option parser does.
type opts map[string]string

func parseOpts(args []string, known ...string) opts {
	o := opts{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "--") || i+1 >= len(args) {
			usageExit("bad argument %q (options are --name value pairs)", a)
		}
		name := a[2:]
		ok := false
		for _, k := range known {
			ok = ok || k == name
		}
		if !ok {
			usageExit("unknown option --%s", name)
		}
		o[name] = args[i+1]
		i++
	}
	return o
}

func (o opts) long(name string, dflt int64) int64 {
	v, ok := o[name]
	if !ok {
		return dflt
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		usageExit("--%s: not an integer: %q", name, v)
	}
	return n
}

func (o opts) str(name, dflt string) string {
	if v, ok := o[name]; ok {
		return v
	}
	return dflt
}

func usageExit(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "bench-go: "+format+"\n", a...)
	os.Exit(2)
}

// raiseNofile raises the soft RLIMIT_NOFILE to the hard limit (pipes need two
// descriptors each).  The Go runtime does this itself since Go 1.19; doing it
// here too keeps the program's behaviour explicit and version-independent.
func raiseNofile() {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		die("getrlimit: %v", err)
	}
	if rl.Cur < rl.Max {
		rl.Cur = rl.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
			die("setrlimit: %v", err)
		}
	}
}

func main() {
	raiseNofile()
	if len(os.Args) >= 2 {
		args := os.Args[2:]
		switch os.Args[1] {
		case "ring":
			os.Exit(benchRing(args))
		case "chan":
			os.Exit(benchChan(args))
		case "idle":
			os.Exit(benchIdle(args))
		case "pipes":
			os.Exit(benchPipes(args))
		case "xchan":
			os.Exit(benchXchan(args))
		case "xping":
			os.Exit(benchXping(args))
		case "fs":
			os.Exit(benchFs(args))
		case "fsopen":
			os.Exit(benchFsopen(args))
		case "skew":
			os.Exit(benchSkew(args))
		case "echo-server":
			os.Exit(echoServer(args))
		}
	}
	fmt.Fprintf(os.Stderr, "usage: bench-go ring|chan|idle|pipes|xchan|xping|fs|fsopen|skew|echo-server [options]\n"+
		"       (see docs/BENCHMARKS.md)\n")
	os.Exit(2)
}
