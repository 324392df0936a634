// SPDX-License-Identifier: MIT

package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
)

// fsopen: C goroutines open, read (up to 4 KiB, at offset 0, with ReadAt)
// and close small files in the page cache, N opens in all, taking the files
// in turn; GOMAXPROCS as set (unset: every CPU).  os.Open is an openat on
// the goroutine's own thread (the runtime tries to register the fd with its
// poller, which refuses a regular file), ReadAt a pread, Close a close.
//
// The files are the ones bench/common/fs_files.h describes, found or made the
// same way, byte for byte, in the same directory as the fs workload's file.

const fsopenMax = 4096

func fsopenSize(i int64) int         { return 64 + int((i*1009)%(fsopenMax-63)) }
func fsopenByte(i int64, j int) byte { return byte(i*131 + int64(j)*7) }

func fsopenGood(i int64, buf []byte, got int) bool {
	n := fsopenSize(i)
	return got == n && buf[0] == fsopenByte(i, 0) && buf[n-1] == fsopenByte(i, n-1)
}

func fsopenCreate(dir string, files int64) {
	tmp := fmt.Sprintf("%s.tmp.%d", dir, os.Getpid())
	if err := os.Mkdir(tmp, 0o755); err != nil {
		die("fsopen: mkdir %s: %v", tmp, err)
	}
	fmt.Fprintf(os.Stderr, "fsopen: writing %d files in %s\n", files, dir)
	buf := make([]byte, fsopenMax)
	for i := int64(0); i < files; i++ {
		n := fsopenSize(i)
		for j := 0; j < n; j++ {
			buf[j] = fsopenByte(i, j)
		}
		if err := os.WriteFile(filepath.Join(tmp, fmt.Sprintf("f%05d", i)), buf[:n], 0o644); err != nil {
			die("fsopen: %v", err)
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		os.RemoveAll(tmp) // another run made it first: theirs is as good
		if _, e := os.Stat(dir); e != nil {
			die("fsopen: rename %s: %v", tmp, err)
		}
	}
}

func fsopenPrepare(dir string, files int64) []string {
	top := filepath.Join(fsDir(dir), fmt.Sprintf("treadle-fsopen-%d", files))
	last := filepath.Join(top, fmt.Sprintf("f%05d", files-1))
	if fi, err := os.Stat(last); err != nil || fi.Size() != int64(fsopenSize(files-1)) {
		fsopenCreate(top, files)
	}
	paths := make([]string, files)
	buf := make([]byte, fsopenMax)
	for i := range paths {
		paths[i] = filepath.Join(top, fmt.Sprintf("f%05d", i))
		got, err := readOnce(paths[i], buf)
		if err != nil || !fsopenGood(int64(i), buf, got) {
			die("fsopen: %s is not what it should be (%v)", paths[i], err)
		}
	}
	return paths
}

// readOnce is one unit of the work: open, read from offset 0, close.
func readOnce(path string, buf []byte) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	got, err := f.ReadAt(buf, 0)
	if err == io.EOF { // a file shorter than the buffer
		err = nil
	}
	if e := f.Close(); err == nil {
		err = e
	}
	return got, err
}

func benchFsopen(args []string) int {
	o := parseOpts(args, "opens", "fibers", "files", "dir")
	opens := o.long("opens", 200000)
	fibers := o.long("fibers", 64)
	files := o.long("files", 1000)
	if opens < 1 || fibers < 1 || files < 1 || files > 99999 {
		usageExit("fsopen: need --opens >= 1, --fibers >= 1, --files 1 to 99999")
	}
	paths := fsopenPrepare(o.str("dir", ""), files)

	run := func(n int64) {
		var next atomic.Int64
		var wg sync.WaitGroup
		for g := int64(0); g < fibers; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, fsopenMax)
				for {
					k := next.Add(1) - 1
					if k >= n {
						return
					}
					i := k % files
					got, err := readOnce(paths[i], buf)
					if err != nil || !fsopenGood(i, buf, got) {
						fail("fsopen", "%s: read %d bytes (%v), or the wrong ones", paths[i], got, err)
					}
				}
			}()
		}
		wg.Wait()
	}

	run(fibers) // warm: the goroutines' threads exist, as the pools' do in C
	var sp span
	sp.begin()
	run(opens)
	sp.end()
	result("fsopen", &sp, fmt.Sprintf("opens=%d fibers=%d files=%d us_per_open=%.3f cpu_us_per_open=%.3f opens_per_s=%.0f",
		opens, fibers, files, sp.wall*1e6/float64(opens), (sp.user+sp.sys)*1e6/float64(opens), float64(opens)/sp.wall))
	return 0
}
