// SPDX-License-Identifier: MIT

package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
)

// fs: C goroutines read 4 KiB at random 4 KiB-aligned offsets of an S MiB
// file in the page cache with (*os.File).ReadAt, N reads in all, GOMAXPROCS
// as set (unset: every CPU).  ReadAt on a regular file is a plain pread on
// the goroutine's own thread; a read that blocks long enough has the runtime
// hand its P to another thread.
//
// The file is the one bench/common/fs_file.h describes, found or made the same way,
// byte for byte: the treadle driver, the libuv peer and this one share it.
// Each goroutine has its own splitmix64 PRNG (goroutine i starts at i+1), and
// every read is checked for its length and for its first word.

const (
	fsBlock    = 4096
	fsChunk    = 1 << 20
	fsSeed     = 0x74726561646c65 // "treadle"
	tmpfsMagic = 0x01021994
)

func splitmix(s *uint64) uint64 {
	*s += 0x9e3779b97f4a7c15
	z := *s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// fsWord is word i of the file (little-endian on disk).
func fsWord(i uint64) uint64 {
	s := fsSeed + i*0x9e3779b97f4a7c15
	return splitmix(&s)
}

func fsIsTmpfs(dir string) bool {
	var st syscall.Statfs_t
	return syscall.Statfs(dir, &st) == nil && int64(st.Type) == tmpfsMagic
}

func fsUsableDir(dir string) bool {
	if dir == "" {
		return false
	}
	fi, err := os.Stat(dir)
	return err == nil && fi.IsDir() && syscall.Access(dir, 2 /* W_OK */) == nil && !fsIsTmpfs(dir)
}

// fsBuildDir is the nearest ancestor of the program's directory that holds
// CMakeCache.txt (bench-go sits in the build directory itself), or "".
func fsBuildDir() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	for p := filepath.Dir(exe); p != "/" && p != "."; p = filepath.Dir(p) {
		if _, err := os.Stat(filepath.Join(p, "CMakeCache.txt")); err == nil && fsUsableDir(p) {
			return p
		}
	}
	return ""
}

// fsDir: --dir, else the build directory, $TMPDIR, /var/tmp, passing over tmpfs.
func fsDir(dir string) string {
	if dir != "" {
		if fsIsTmpfs(dir) {
			fmt.Fprintf(os.Stderr, "fs: warning: %s is tmpfs: every read is a page-cache hit by construction\n", dir)
		}
		return dir
	}
	if d := fsBuildDir(); d != "" {
		return d
	}
	for _, d := range []string{os.Getenv("TMPDIR"), "/var/tmp"} {
		if fsUsableDir(d) {
			return d
		}
	}
	die("fs: no disk-backed directory found for the file: give --dir")
	return ""
}

// fsCreate writes the file under a temporary name, syncs it and renames it
// into place, so that two runs that race each make a whole file.
func fsCreate(path string, mib int64) {
	tmp := fmt.Sprintf("%s.tmp.%d", path, os.Getpid())
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		die("fs: create %s: %v", tmp, err)
	}
	fmt.Fprintf(os.Stderr, "fs: writing %s (%d MiB)\n", path, mib)
	chunk := make([]byte, fsChunk)
	var word uint64
	for c := int64(0); c < mib; c++ {
		for at := 0; at < fsChunk; at += 8 {
			binary.LittleEndian.PutUint64(chunk[at:], fsWord(word))
			word++
		}
		if _, err := f.Write(chunk); err != nil {
			die("fs: write %s: %v", tmp, err)
		}
	}
	if err := syscall.Fdatasync(int(f.Fd())); err != nil {
		die("fs: sync %s: %v", tmp, err)
	}
	if err := f.Close(); err != nil {
		die("fs: close %s: %v", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		die("fs: rename %s: %v", tmp, err)
	}
}

// fsPrepare finds or makes the file, reads it once whole (so that it is in
// the page cache) and returns its path.
func fsPrepare(dir string, mib int64) string {
	path := filepath.Join(fsDir(dir), fmt.Sprintf("treadle-fs-%dMiB.dat", mib))
	if fi, err := os.Stat(path); err != nil || fi.Size() != mib*fsChunk {
		fsCreate(path, mib)
	}
	f, err := os.Open(path)
	if err != nil {
		die("fs: open %s: %v", path, err)
	}
	defer f.Close()
	chunk, total := make([]byte, fsChunk), int64(0)
	for {
		n, err := f.Read(chunk)
		total += int64(n)
		if err == io.EOF {
			break
		}
		if err != nil {
			die("fs: read %s: %v", path, err)
		}
	}
	if total != mib*fsChunk {
		die("fs: %s has %d bytes, expected %d", path, total, mib*fsChunk)
	}
	return path
}

func benchFs(args []string) int {
	o := parseOpts(args, "reads", "fibers", "file-mib", "dir")
	reads := o.long("reads", 1000000)
	fibers := o.long("fibers", 64)
	mib := o.long("file-mib", 256)
	if reads < 1 || fibers < 1 || mib < 1 || mib > 1<<20 {
		usageExit("fs: need --reads >= 1, --fibers >= 1, --file-mib >= 1")
	}
	path := fsPrepare(o.str("dir", ""), mib)
	f, err := os.Open(path)
	if err != nil {
		die("fs: open %s: %v", path, err)
	}
	blocks := uint64(mib) * (fsChunk / fsBlock)
	seeds := make([]uint64, fibers)
	bufs := make([][]byte, fibers)
	for i := range seeds {
		seeds[i] = uint64(i) + 1
		bufs[i] = make([]byte, fsBlock)
	}

	run := func(n int64) {
		var left, done atomic.Int64
		left.Store(n)
		var wg sync.WaitGroup
		for i := int64(0); i < fibers; i++ {
			wg.Add(1)
			go func(i int64) {
				defer wg.Done()
				// The PRNG state and the count live in locals, not in shared
				// slices: neighbours' words would share a cache line.
				seed, buf, mine := seeds[i], bufs[i], int64(0)
				for left.Add(-1) >= 0 {
					off := int64(splitmix(&seed)%blocks) * fsBlock
					got, err := f.ReadAt(buf, off)
					if got != fsBlock || err != nil {
						fail("fs", "read at %d returned %d (%v)", off, got, err)
					}
					if binary.LittleEndian.Uint64(buf) != fsWord(uint64(off)/8) {
						fail("fs", "read at %d: wrong data", off)
					}
					mine++
				}
				seeds[i] = seed
				done.Add(mine)
			}(i)
		}
		wg.Wait()
		if done.Load() != n {
			fail("fs", "%d of %d reads done", done.Load(), n)
		}
	}

	run(fibers) // warm: the goroutines' threads exist, as the pools' do in C
	var sp span
	sp.begin()
	run(reads)
	sp.end()
	result("fs", &sp, fmt.Sprintf("reads=%d fibers=%d file_mib=%d us_per_read=%.3f cpu_us_per_read=%.3f reads_per_s=%.0f",
		reads, fibers, mib, sp.wall*1e6/float64(reads), (sp.user+sp.sys)*1e6/float64(reads),
		float64(reads)/sp.wall))
	return 0
}
