// SPDX-License-Identifier: MIT

//! bench-may: the may peer (Rust stackful coroutines, crates.io `may`) of
//! treadle-bench's fiber workloads (docs/BENCHMARKS.md), with the same command
//! line and the same RESULT line as the C driver:
//!
//! ```text
//! bench-may ring  --threads 503 --hops T [--via wake|chan]
//! bench-may chan  --hops T
//! bench-may fiber-spawn --fibers N --batch B [--stack S]
//! bench-may idle  --fibers F [--park chan|read] [--stack S]
//! bench-may echo-server [--listen ADDR]   (prints PORT n, serves until stdin ends)
//! bench-may http-server [--listen ADDR]   (the same for HTTP: ../rust-shared/http.rs)
//! ```
//!
//! may runs its coroutines on worker threads, each with its own epoll loop,
//! plus a timer thread; here one worker (`config().set_workers(1)`), so that
//! every coroutine and all the I/O share one thread, as treadle's loop does.
//! Stacks: may's default (0x1000 words, 32 KiB), or --stack bytes.  impl is
//! "may".  A run that fails its own check exits 1 without a RESULT line; a
//! malformed command line exits 2.

use std::io::{Read, Write};
use std::os::unix::io::FromRawFd;
use std::process::exit;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use may::coroutine::{self, Coroutine};
use may::go;
use may::sync::mpsc;

#[path = "../../rust-shared/http.rs"]
mod http;
#[path = "../../rust-shared/harness.rs"]
mod harness;
use harness::*;

/// The name in RESULT lines and messages.
const IMPL: &str = "may";

// ---- ring: a token around N coroutines ------------------------------------
//
// The count of hops left is the token: the holder of v stops the run if v is
// 0, else passes v - 1 on (a hop).  So T hops are made and the run ends at
// coroutine T mod N; both are checked.  --via wake: each coroutine parks
// (coroutine::park) until its predecessor unparks it (Coroutine::unpark,
// which leaves a permit if it comes first), the count in a variable of the
// ring.  --via chan: may has no rendezvous channel; an unbounded
// mpsc::channel per neighbour, which never holds more than the one token.
// The finisher tells main (a std channel), which stops the clock.
fn ring(o: &Opts) -> ! {
    let n = o.long("threads", 503).max(2) as usize;
    let hops = o.long("hops", 10_000_000);
    let via = o.str("via", "wake").to_string();
    let passed = Arc::new(AtomicI64::new(0));
    let (fin_tx, fin_rx) = std::sync::mpsc::channel::<usize>();
    let mut sp;
    match via.as_str() {
        "wake" => {
            let token = Arc::new(AtomicI64::new(0));
            let ring: Arc<OnceLock<Vec<Coroutine>>> = Arc::new(OnceLock::new());
            let done = Arc::new(AtomicBool::new(false));
            let mut hs = Vec::with_capacity(n);
            for i in 0..n {
                let (token, ring, done, passed, fin) =
                    (token.clone(), ring.clone(), done.clone(), passed.clone(), fin_tx.clone());
                hs.push(go!(move || loop {
                    coroutine::park();
                    if done.load(Relaxed) {
                        return;
                    }
                    let members = ring.get().unwrap();
                    let v = token.load(Relaxed);
                    if v == 0 {
                        done.store(true, Relaxed);
                        let _ = fin.send(i);
                        return;
                    }
                    token.store(v - 1, Relaxed);
                    passed.fetch_add(1, Relaxed);
                    members[(i + 1) % n].unpark();
                }));
            }
            let _ = ring.set(hs.iter().map(|h| h.coroutine().clone()).collect());
            std::thread::sleep(Duration::from_millis(20)); // every member reaches its park
            sp = Span::begin();
            token.store(hops, Relaxed);
            ring.get().unwrap()[0].unpark(); // hands the token over: not a hop
        }
        "chan" => {
            let (txs, mut rxs): (Vec<_>, Vec<_>) = (0..n).map(|_| mpsc::channel::<i64>()).map(|(t, r)| (t, Some(r))).unzip();
            for i in 0..n {
                let rx = rxs[i].take().unwrap();
                let next = txs[(i + 1) % n].clone();
                let (passed, fin) = (passed.clone(), fin_tx.clone());
                go!(move || {
                    while let Ok(v) = rx.recv() {
                        if v == 0 {
                            let _ = fin.send(i);
                            return;
                        }
                        passed.fetch_add(1, Relaxed);
                        if next.send(v - 1).is_err() {
                            return;
                        }
                    }
                });
            }
            std::thread::sleep(Duration::from_millis(20));
            sp = Span::begin();
            txs[0].send(hops).unwrap_or_else(|_| die("send"));
        }
        _ => usage_exit("ring: --via must be wake or chan"),
    }
    let last = fin_rx.recv().unwrap_or_else(|_| fail("ring", "no coroutine finished"));
    sp.end();
    let got = passed.load(Relaxed);
    if got != hops || last != (hops % n as i64) as usize {
        fail("ring", &format!("{got} hops of {hops}, stopped at coroutine {last} (expected {})", hops % n as i64));
    }
    result(
        "ring",
        &sp,
        &format!(
            "threads={n} hops={hops} via={via} ns_per_hop={:.2} cpu_ns_per_hop={:.2}",
            sp.wall * 1e9 / hops as f64,
            (sp.user + sp.sys) * 1e9 / hops as f64
        ),
    )
}

// ---- chan: ping-pong over channels -----------------------------------------
//
// may has no rendezvous channel: an mpsc::channel per direction (tokio's
// form).  A hop is one send and its receive; every value is checked, and
// so is the count.
fn chan(o: &Opts) -> ! {
    let hops = o.long("hops", 10_000_000);
    let (ab_tx, ab_rx) = mpsc::channel::<i64>();
    let (ba_tx, ba_rx) = mpsc::channel::<i64>();
    let seen = Arc::new(AtomicI64::new(0));
    let mut sp = Span::begin();
    let s1 = seen.clone();
    let pong = go!(move || {
        let mut v = 1;
        while v <= hops {
            if ab_rx.recv() != Ok(v - 1) {
                return false;
            }
            s1.fetch_add(1, Relaxed);
            if v < hops && ba_tx.send(v).is_err() {
                return false;
            }
            v += 2;
        }
        true
    });
    let s2 = seen.clone();
    let ping = go!(move || {
        let mut v = 0;
        while v < hops {
            if ab_tx.send(v).is_err() {
                return false;
            }
            if v + 1 < hops {
                if ba_rx.recv() != Ok(v + 1) {
                    return false;
                }
                s2.fetch_add(1, Relaxed);
            }
            v += 2;
        }
        true
    });
    let ok = pong.join().unwrap_or(false) & ping.join().unwrap_or(false);
    sp.end();
    let got = seen.load(Relaxed);
    if !ok || got != hops {
        fail("chan", &format!("a wrong value, or {got} hops of {hops}"));
    }
    result(
        "chan",
        &sp,
        &format!(
            "hops={hops} ns_per_hop={:.2} cpu_ns_per_hop={:.2}",
            sp.wall * 1e9 / hops as f64,
            (sp.user + sp.sys) * 1e9 / hops as f64
        ),
    )
}

// ---- fiber-spawn: start and join N coroutines, B at a time ------------------
//
// A coroutine starts B coroutines (go!), then joins each in turn, until N
// have run.  Coroutine i returns i + 1; the sum of the joins is checked
// against N (N + 1) / 2.
fn fiber_spawn(o: &Opts) -> ! {
    let n = o.long("fibers", 1_000_000).max(1) as u64;
    let batch = o.long("batch", 1000).max(1) as u64;
    let stack = o.long("stack", 0);
    let mut sp = Span::begin();
    let sum = go!(move || {
        let mut sum = 0u64;
        let mut done = 0u64;
        let mut hs = Vec::with_capacity(batch as usize);
        while done < n {
            let k = batch.min(n - done);
            for i in 0..k {
                let v = done + i + 1;
                hs.push(go!(move || v));
            }
            for h in hs.drain(..) {
                sum += h.join().unwrap_or(0);
            }
            done += k;
        }
        sum
    })
    .join()
    .unwrap_or(0);
    sp.end();
    let want = n * (n + 1) / 2;
    if sum != want {
        fail("fiber-spawn", &format!("the joins collected {sum}, expected {want}"));
    }
    result(
        "fiber-spawn",
        &sp,
        &format!(
            "fibers={n} batch={batch} stack={stack} fibers_per_s={:.0} cpu_ns_per_fiber={:.1}",
            n as f64 / sp.wall,
            (sp.user + sp.sys) * 1e9 / n as f64
        ),
    )
}

// ---- idle: memory per blocked coroutine --------------------------------------
//
// F coroutines, each blocked for good: in a receive from a channel of its own
// (--park chan: may's channels have one receiver; Go's peer does the same),
// or in a read of the read end of a pipe of its own through may::io::CoIo
// (--park read, made by the coroutine, so that may's state per fd counts).
// bytes_per_fiber = (VmRSS with all F blocked - VmRSS before) * 1024 / F,
// after a settle of 200 ms.  Then all are woken (the senders dropped, or a
// byte written to every pipe, checked by its reader) and timed until the
// last has run: wake_ns, per coroutine.
fn idle(o: &Opts) -> ! {
    let n = o.long("fibers", 100_000).max(1) as usize;
    let stack = o.long("stack", 0);
    let park = o.str("park", "chan").to_string();
    let read_mode = match park.as_str() {
        "read" => true,
        "chan" => false,
        _ => usage_exit("idle: --park chan|read"),
    };
    // may maps each coroutine's stack with a guard page below it: two mappings
    // a coroutine, which the kernel's vm.max_map_count bounds.
    if let Some(max) = std::fs::read_to_string("/proc/sys/vm/max_map_count").ok().and_then(|v| v.trim().parse::<usize>().ok()) {
        if 2 * n + 1000 > max {
            fail("idle", &format!("{n} coroutines need {} stack mappings (a stack and its guard page each): \
                                   more than vm.max_map_count ({max}) allows", 2 * n));
        }
    }
    let mut pipes = Vec::new();
    if read_mode {
        for i in 0..n {
            let mut fds = [0i32; 2];
            // SAFETY: pipe fills the two ints it is given.
            if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
                die(&format!("pipe {i} of {n}: {}", std::io::Error::last_os_error()));
            }
            pipes.push(fds);
        }
    }
    static BLOCKED: AtomicUsize = AtomicUsize::new(0);
    static WOKEN: AtomicUsize = AtomicUsize::new(0);
    static FAILED: AtomicBool = AtomicBool::new(false);
    let before = proc_status_kb("VmRSS");
    let mut sp = Span::begin();
    let mut senders = Vec::with_capacity(if read_mode { 0 } else { n });
    for i in 0..n {
        if read_mode {
            let fd = pipes[i][0];
            go!(move || {
                // SAFETY: fd is this coroutine's own pipe end; it is closed by the exit.
                let f = unsafe { std::fs::File::from_raw_fd(fd) };
                let mut io = may::io::CoIo::new(f).unwrap_or_else(|_| die("CoIo::new"));
                let mut buf = [0u8; 64];
                BLOCKED.fetch_add(1, Relaxed);
                match io.read(&mut buf) {
                    Ok(1) if buf[0] == b'w' => {}
                    _ => FAILED.store(true, Relaxed),
                }
                WOKEN.fetch_add(1, Relaxed);
                std::mem::forget(io); // the pipe stays open: main closes nothing
            });
        } else {
            let (tx, rx) = mpsc::channel::<i32>();
            senders.push(tx);
            go!(move || {
                BLOCKED.fetch_add(1, Relaxed);
                if rx.recv().is_ok() {
                    FAILED.store(true, Relaxed);
                }
                WOKEN.fetch_add(1, Relaxed);
            });
        }
    }
    for _ in 0..10_000 {
        if BLOCKED.load(Relaxed) >= n {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(200)); // settle: the last ones reach their wait
    let blocked = BLOCKED.load(Relaxed);
    let after = proc_status_kb("VmRSS");
    let bytes_per_fiber = (after - before) as f64 * 1024.0 / n as f64;
    let t0 = Instant::now();
    if read_mode {
        for p in &pipes {
            // SAFETY: writes one byte from a static buffer to a pipe we own.
            if unsafe { libc::write(p[1], b"w".as_ptr().cast(), 1) } != 1 {
                die(&format!("write: {}", std::io::Error::last_os_error()));
            }
        }
    } else {
        senders.clear();
    }
    while WOKEN.load(Relaxed) < n && !FAILED.load(Relaxed) {
        std::thread::sleep(Duration::from_micros(100));
    }
    let wake_ns = t0.elapsed().as_secs_f64() * 1e9 / n as f64;
    sp.end();
    if FAILED.load(Relaxed) || blocked != n || WOKEN.load(Relaxed) != n {
        fail("idle", &format!("{blocked} of {n} blocked, {} woken", WOKEN.load(Relaxed)));
    }
    result(
        "idle",
        &sp,
        &format!(
            "fibers={n} park={park} stack={stack} rss_before_kb={before} rss_after_kb={after} \
             bytes_per_fiber={bytes_per_fiber:.0} wake_ns={wake_ns:.0}"
        ),
    )
}

// ---- echo-server ------------------------------------------------------------
//
// The peer of treadle-bench's echo-server (docs/BENCHMARKS.md, "echo"), with
// the same contract: listen (default 127.0.0.1:0), print "PORT n", serve
// until stdin reaches end of file, then print "SERVED conns=N bytes=B" and
// exit 0.  An acceptor coroutine, a coroutine per connection echoing what
// arrives (read into a 16 KiB buffer, write_all of it), TCP_NODELAY; stdin
// is read by a plain thread, blocked in read(2).
static ACCEPTED: AtomicU64 = AtomicU64::new(0);
static ECHOED: AtomicU64 = AtomicU64::new(0);

fn echo_server(o: &Opts) -> ! {
    let addr = o.str("listen", "127.0.0.1:0").to_string();
    let ln = may::net::TcpListener::bind(addr.as_str()).unwrap_or_else(|e| die(&format!("listen on {addr}: {e}")));
    let port = ln.local_addr().map(|a| a.port()).unwrap_or_else(|e| die(&e.to_string()));
    println!("PORT {port}");
    let _ = std::io::stdout().flush();
    std::thread::spawn(|| {
        let mut b = [0u8; 256];
        let mut stdin = std::io::stdin();
        while matches!(stdin.read(&mut b), Ok(n) if n > 0) {}
        println!("SERVED conns={} bytes={}", ACCEPTED.load(Relaxed), ECHOED.load(Relaxed));
        let _ = std::io::stdout().flush();
        exit(0);
    });
    let acceptor = go!(move || {
        for s in ln.incoming() {
            let mut s = match s {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("bench-may echo-server: accept: {e}");
                    coroutine::sleep(Duration::from_millis(10));
                    continue;
                }
            };
            let _ = s.set_nodelay(true);
            ACCEPTED.fetch_add(1, Relaxed);
            go!(move || {
                let mut buf = vec![0u8; 16 * 1024];
                loop {
                    let n = match s.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    if s.write_all(&buf[..n]).is_err() {
                        return;
                    }
                    ECHOED.fetch_add(n as u64, Relaxed);
                }
            });
        }
    });
    let _ = acceptor.join();
    die("echo-server: the acceptor ended")
}

// ---- http-server ------------------------------------------------------------
//
// The peer of examples/httpd in the http group (docs/BENCHMARKS.md, "HTTP"),
// with echo-server's contract, printing "SERVED conns=N requests=R" at the
// end.  No HTTP library (../rust-shared/http.rs parses and answers): as echo-server, an
// acceptor coroutine, a coroutine per connection reading requests into its
// 16 KiB buffer (read, which parks the coroutine until the socket is
// readable) and answering them (write_all), TCP_NODELAY.
static ANSWERED: AtomicU64 = AtomicU64::new(0);

fn http_conn(mut s: may::net::TcpStream) {
    let mut c = http::Conn::new(vec![0u8; http::IN_CAP]);
    let mut out: Vec<u8> = Vec::with_capacity(http::OUT_CAP);
    loop {
        let n = match s.read(&mut c.input[c.held..]) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        c.held += n;
        c.date_refresh();
        loop {
            let step = c.answer(&mut out);
            ANSWERED.fetch_add(std::mem::take(&mut c.answered), Relaxed);
            if !out.is_empty() && s.write_all(&out).is_err() {
                return;
            }
            out.clear();
            match step {
                http::Step::Read => break,
                http::Step::More => continue,
                http::Step::Close => return,
            }
        }
    }
}

fn http_server(o: &Opts) -> ! {
    let addr = o.str("listen", "127.0.0.1:0").to_string();
    let ln = may::net::TcpListener::bind(addr.as_str()).unwrap_or_else(|e| die(&format!("listen on {addr}: {e}")));
    let port = ln.local_addr().map(|a| a.port()).unwrap_or_else(|e| die(&e.to_string()));
    println!("PORT {port}");
    let _ = std::io::stdout().flush();
    std::thread::spawn(|| {
        let mut b = [0u8; 256];
        let mut stdin = std::io::stdin();
        while matches!(stdin.read(&mut b), Ok(n) if n > 0) {}
        println!("SERVED conns={} requests={}", ACCEPTED.load(Relaxed), ANSWERED.load(Relaxed));
        let _ = std::io::stdout().flush();
        exit(0);
    });
    let acceptor = go!(move || {
        for s in ln.incoming() {
            let s = match s {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("bench-may http-server: accept: {e}");
                    coroutine::sleep(Duration::from_millis(10));
                    continue;
                }
            };
            let _ = s.set_nodelay(true);
            ACCEPTED.fetch_add(1, Relaxed);
            go!(move || http_conn(s));
        }
    });
    let _ = acceptor.join();
    die("http-server: the acceptor ended")
}

fn main() {
    raise_nofile();
    let argv: Vec<String> = std::env::args().collect();
    let usage = || -> ! {
        usage_exit("usage: bench-may ring|chan|fiber-spawn|idle|echo-server|http-server [options]\n       (see docs/BENCHMARKS.md)")
    };
    if argv.len() < 2 {
        usage();
    }
    let bench = argv[1].as_str();
    let known: &[&str] = match bench {
        "ring" => &["threads", "hops", "via"],
        "chan" => &["hops"],
        "fiber-spawn" => &["fibers", "batch", "stack"],
        "idle" => &["fibers", "park", "stack"],
        "echo-server" | "http-server" => &["listen"],
        _ => usage(),
    };
    let opts = Opts::parse(&argv[2..], known);
    // One worker thread runs every coroutine and the I/O.
    may::config().set_workers(1);
    let stack = opts.long("stack", 0);
    if stack > 0 {
        may::config().set_stack_size(stack as usize / std::mem::size_of::<usize>());
    }
    match bench {
        "ring" => ring(&opts),
        "chan" => chan(&opts),
        "fiber-spawn" => fiber_spawn(&opts),
        "idle" => idle(&opts),
        "echo-server" => echo_server(&opts),
        "http-server" => http_server(&opts),
        _ => unreachable!(),
    }
}
