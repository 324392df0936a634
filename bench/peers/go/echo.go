// SPDX-License-Identifier: MIT

package main

// echo-server: the Go peer of treadle-bench's echo-server (docs/BENCHMARKS.md,
// "echo"), with the same contract: listen (default 127.0.0.1:0), print
// "PORT n" on stdout, serve until stdin reaches end of file, exit 0.  A
// goroutine per connection echoes what arrives (Read into a 16 KiB buffer,
// Write of all of it: treadle's server does the same).  Run it with
// GOMAXPROCS=1 for the one-loop figure.  Go sets TCP_NODELAY on every TCP
// connection by default, as treadle's server and client do explicitly.
//
// The client is treadle-bench echo for every server; bench/drivers/echo_driver.py
// measures the server's CPU time from /proc.

import (
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

func echoConn(c net.Conn) {
	defer c.Close()
	buf := make([]byte, 16*1024)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func echoServer(args []string) int {
	o := parseOpts(args, "listen")
	ln, err := net.Listen("tcp", o.str("listen", "127.0.0.1:0"))
	if err != nil {
		die("echo-server: %v", err)
	}
	fmt.Printf("PORT %d\n", ln.Addr().(*net.TCPAddr).Port)
	os.Stdout.Sync()
	// Stop when stdin ends: the driver closes it.
	go func() {
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench-go echo-server: accept: %v\n", err)
			time.Sleep(10 * time.Millisecond) // EMFILE and the like: do not spin
			continue
		}
		go echoConn(c)
	}
}
