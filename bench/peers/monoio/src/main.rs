// SPDX-License-Identifier: MIT

//! bench-monoio: the monoio peer (crates.io `monoio`, a thread-per-core
//! runtime on io_uring) of treadle-bench's fiber workloads
//! (docs/BENCHMARKS.md), with the same command line and the same RESULT line
//! as the C driver:
//!
//! ```text
//! bench-monoio ring  --threads 503 --hops T [--via wake]
//! bench-monoio fiber-spawn --fibers N --batch B
//! bench-monoio idle  --fibers F [--park read]
//! bench-monoio echo-server [--listen ADDR]   (prints PORT n, serves until stdin ends)
//! bench-monoio http-server [--listen ADDR]   (the same for HTTP: ../rust-shared/http.rs)
//! ```
//!
//! One runtime on the main thread (monoio's FusionDriver: io_uring where the
//! kernel has it, else epoll; the key driver= says which), its tasks spawned
//! with monoio::spawn.  monoio has no channel and no notification primitive
//! of its own (no chan workload; ring wakes through a permit written here on
//! std's Waker), and its tasks have no stack (no --stack).  impl is "monoio".
//! A run that fails its own check exits 1 without a RESULT line; a malformed
//! command line exits 2.

use std::cell::{Cell, RefCell};
use std::future::{poll_fn, Future};
use std::io::{Read, Write};
use std::os::unix::io::AsRawFd;
use std::process::exit;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use monoio::buf::IoBufMut;
use monoio::io::{AsyncReadRent, AsyncWriteRentExt};
use monoio::net::unix::UnixStream;
use monoio::net::{TcpListener, TcpStream};

#[path = "../../rust-shared/http.rs"]
mod http;
#[path = "../../rust-shared/harness.rs"]
mod harness;
use harness::*;

/// The name in RESULT lines and messages.
const IMPL: &str = "monoio";

/// A one-task wake-up: notify() sets the permit and wakes the task waiting
/// in wait(), if any; a notify() that comes first is not lost.  What a
/// single-threaded runtime without a Notify of its own is given to wake a
/// task (tokio's peer uses tokio::sync::Notify).
#[derive(Default)]
struct Permit {
    set: Cell<bool>,
    waker: RefCell<Option<Waker>>,
}

impl Permit {
    fn notify(&self) {
        self.set.set(true);
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
    }

    fn wait(&self) -> impl Future<Output = ()> + '_ {
        poll_fn(move |cx| {
            if self.set.replace(false) {
                Poll::Ready(())
            } else {
                *self.waker.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            }
        })
    }
}

// ---- ring: a token around N tasks ---------------------------------------------
//
// The count of hops left is the token: the holder of v stops the run if v is
// 0, else passes v - 1 on (a hop).  So T hops are made and the run ends at
// task T mod N; both are checked.  --via wake only (monoio has no channel):
// each task waits on a Permit of its own, set by its predecessor.
async fn ring(o: &Opts) -> ! {
    let n = o.long("threads", 503).max(2) as usize;
    let hops = o.long("hops", 10_000_000);
    if o.str("via", "wake") != "wake" {
        usage_exit("ring: monoio has no channel: --via wake only");
    }
    let permits: Rc<Vec<Permit>> = Rc::new((0..n).map(|_| Permit::default()).collect());
    let token = Rc::new(Cell::new(0i64));
    let passed = Rc::new(Cell::new(0i64));
    let finisher = Rc::new(Cell::new(usize::MAX));
    let fin = Rc::new(Permit::default());
    for i in 0..n {
        let (permits, token, passed, finisher, fin) =
            (permits.clone(), token.clone(), passed.clone(), finisher.clone(), fin.clone());
        monoio::spawn(async move {
            loop {
                permits[i].wait().await;
                let v = token.get();
                if v == 0 {
                    finisher.set(i);
                    fin.notify();
                    return;
                }
                token.set(v - 1);
                passed.set(passed.get() + 1);
                permits[(i + 1) % n].notify();
            }
        });
    }
    monoio::time::sleep(Duration::from_millis(1)).await; // every task reaches its first wait
    let mut sp = Span::begin();
    token.set(hops);
    permits[0].notify(); // hands the token over: not a hop
    fin.wait().await;
    sp.end();
    if passed.get() != hops || finisher.get() != (hops % n as i64) as usize {
        fail(
            "ring",
            &format!("{} hops of {hops}, stopped at task {} (expected {})", passed.get(), finisher.get(), hops % n as i64),
        );
    }
    result(
        "ring",
        &sp,
        &format!(
            "threads={n} hops={hops} via=wake driver={} ns_per_hop={:.2} cpu_ns_per_hop={:.2}",
            driver(),
            sp.wall * 1e9 / hops as f64,
            (sp.user + sp.sys) * 1e9 / hops as f64
        ),
    )
}

// ---- fiber-spawn: start and join N tasks, B at a time --------------------------
//
// The main task spawns B tasks (monoio::spawn), then awaits each JoinHandle
// in turn, until N have run.  Task i returns i + 1; the sum is checked
// against N (N + 1) / 2.
async fn fiber_spawn(o: &Opts) -> ! {
    let n = o.long("fibers", 1_000_000).max(1) as u64;
    let batch = o.long("batch", 1000).max(1) as u64;
    let mut sum = 0u64;
    let mut hs = Vec::with_capacity(batch as usize);
    let mut sp = Span::begin();
    let mut done = 0u64;
    while done < n {
        let k = batch.min(n - done);
        for i in 0..k {
            let v = done + i + 1;
            hs.push(monoio::spawn(async move { v }));
        }
        for h in hs.drain(..) {
            sum += h.await;
        }
        done += k;
    }
    sp.end();
    let want = n * (n + 1) / 2;
    if sum != want {
        fail("fiber-spawn", &format!("the joins collected {sum}, expected {want}"));
    }
    result(
        "fiber-spawn",
        &sp,
        &format!(
            "fibers={n} batch={batch} stack=0 fibers_per_s={:.0} cpu_ns_per_fiber={:.1}",
            n as f64 / sp.wall,
            (sp.user + sp.sys) * 1e9 / n as f64
        ),
    )
}

// ---- idle: memory per blocked task -----------------------------------------------
//
// F tasks, each blocked for good in a read of a socket of its own (one end
// of a UnixStream pair; monoio reads no pipes), with a 64-byte buffer it
// owns, as monoio's reads take one.  bytes_per_fiber = (VmRSS with all F
// blocked - VmRSS before) * 1024 / F, the pairs made before.  Then a byte is
// written to every other end, each reader checks it, and the wake-up of all
// is timed: wake_ns, per task.
async fn idle(o: &Opts) -> ! {
    let n = o.long("fibers", 100_000).max(1) as usize;
    if o.str("park", "read") != "read" {
        usage_exit("idle: monoio has no channel: --park read only");
    }
    let mut ends = Vec::with_capacity(n);
    let mut others = Vec::with_capacity(n);
    for i in 0..n {
        let (a, b) = UnixStream::pair().unwrap_or_else(|e| die(&format!("socketpair {i} of {n}: {e}")));
        ends.push(a);
        others.push(b);
    }
    let blocked = Rc::new(Cell::new(0usize));
    let woken = Rc::new(Cell::new(0usize));
    let failed = Rc::new(Cell::new(false));
    let all = Rc::new(Permit::default());
    let before = proc_status_kb("VmRSS");
    let mut sp = Span::begin();
    for mut end in ends.drain(..) {
        let (blocked, woken, failed, all) = (blocked.clone(), woken.clone(), failed.clone(), all.clone());
        monoio::spawn(async move {
            blocked.set(blocked.get() + 1);
            let (res, buf) = end.read(vec![0u8; 64]).await;
            if !matches!(res, Ok(1)) || buf[0] != b'w' {
                failed.set(true);
            }
            blocked.set(blocked.get() - 1);
            woken.set(woken.get() + 1);
            if woken.get() == n {
                all.notify();
            }
            std::mem::forget(end); // left open: the exit closes it
        });
    }
    for _ in 0..1000 {
        monoio::time::sleep(Duration::from_millis(1)).await;
        if blocked.get() >= n {
            break;
        }
    }
    monoio::time::sleep(Duration::from_millis(10)).await; // every read submitted
    let blocked_at_measure = blocked.get();
    let after = proc_status_kb("VmRSS");
    let bytes_per_fiber = (after - before) as f64 * 1024.0 / n as f64;
    let t0 = Instant::now();
    for b in &others {
        // SAFETY: writes one byte from a static buffer to a socket we own.
        if unsafe { libc::write(b.as_raw_fd(), b"w".as_ptr().cast(), 1) } != 1 {
            die(&format!("write: {}", std::io::Error::last_os_error()));
        }
    }
    all.wait().await;
    let wake_ns = t0.elapsed().as_secs_f64() * 1e9 / n as f64;
    sp.end();
    if failed.get() || blocked_at_measure != n || woken.get() != n {
        fail("idle", &format!("{blocked_at_measure} of {n} blocked, {} woken", woken.get()));
    }
    result(
        "idle",
        &sp,
        &format!(
            "fibers={n} park=read stack=0 driver={} rss_before_kb={before} rss_after_kb={after} \
             bytes_per_fiber={bytes_per_fiber:.0} wake_ns={wake_ns:.0}",
            driver()
        ),
    )
}

// ---- echo-server -------------------------------------------------------------
//
// The peer of treadle-bench's echo-server (docs/BENCHMARKS.md, "echo"), with
// the same contract: listen (default 127.0.0.1:0), print "PORT n", serve
// until stdin reaches end of file, then print "SERVED conns=N bytes=B" and
// exit 0.  monoio's echo: accept in the main task, a task per connection
// reading into an owned 16 KiB buffer and write_all of it (each a request
// on the ring), TCP_NODELAY; stdin is read by a plain thread, blocked in
// read(2).
static ACCEPTED: AtomicU64 = AtomicU64::new(0);
static ECHOED: AtomicU64 = AtomicU64::new(0);

async fn echo_conn(mut s: TcpStream) {
    let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
    loop {
        let (res, b) = s.read(buf).await;
        buf = b;
        let n = match res {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let (res, b) = s.write_all(buf).await;
        buf = b;
        if res.is_err() {
            return;
        }
        ECHOED.fetch_add(n as u64, Relaxed);
        buf.clear();
    }
}

async fn echo_server(o: &Opts) -> ! {
    let addr = o.str("listen", "127.0.0.1:0").to_string();
    let ln = TcpListener::bind(addr.as_str()).unwrap_or_else(|e| die(&format!("listen on {addr}: {e}")));
    let port = ln.local_addr().map(|a| a.port()).unwrap_or_else(|e| die(&e.to_string()));
    println!("PORT {port}");
    let _ = std::io::stdout().flush();
    eprintln!("bench-monoio echo-server: listening on port {port}, driver {}", driver());
    std::thread::spawn(|| {
        let mut b = [0u8; 256];
        let mut stdin = std::io::stdin();
        while matches!(stdin.read(&mut b), Ok(n) if n > 0) {}
        println!("SERVED conns={} bytes={}", ACCEPTED.load(Relaxed), ECHOED.load(Relaxed));
        let _ = std::io::stdout().flush();
        exit(0);
    });
    loop {
        match ln.accept().await {
            Ok((s, _)) => {
                let _ = s.set_nodelay(true);
                ACCEPTED.fetch_add(1, Relaxed);
                monoio::spawn(echo_conn(s));
            }
            Err(e) => {
                eprintln!("bench-monoio echo-server: accept: {e}");
                monoio::time::sleep(Duration::from_millis(10)).await; // EMFILE and the like: do not spin
            }
        }
    }
}

// ---- http-server -------------------------------------------------------------
//
// The peer of examples/httpd in the http group (docs/BENCHMARKS.md, "HTTP"),
// with echo-server's contract, printing "SERVED conns=N requests=R" at the
// end.  No HTTP library (../rust-shared/http.rs parses and answers): as echo-server,
// accept in the main task, a task per connection reading requests into the
// spare room of its owned 16 KiB buffer (read of a slice_mut of it) and
// answering them (write_all of an owned buffer), each a request on the ring,
// TCP_NODELAY.
static ANSWERED: AtomicU64 = AtomicU64::new(0);

async fn http_conn(mut s: TcpStream) {
    let mut c = http::Conn::new(Vec::with_capacity(http::IN_CAP));
    let mut out: Vec<u8> = Vec::with_capacity(http::OUT_CAP);
    loop {
        let room = std::mem::take(&mut c.input).slice_mut(c.held..http::IN_CAP);
        let (res, room) = s.read(room).await;
        c.input = room.into_inner();
        match res {
            Ok(0) | Err(_) => return,
            Ok(n) => c.held += n,
        }
        c.date_refresh();
        loop {
            let step = c.answer(&mut out);
            ANSWERED.fetch_add(std::mem::take(&mut c.answered), Relaxed);
            if !out.is_empty() {
                let (res, b) = s.write_all(out).await;
                out = b;
                if res.is_err() {
                    return;
                }
                out.clear();
            }
            match step {
                http::Step::Read => break,
                http::Step::More => continue,
                http::Step::Close => return,
            }
        }
    }
}

async fn http_server(o: &Opts) -> ! {
    let addr = o.str("listen", "127.0.0.1:0").to_string();
    let ln = TcpListener::bind(addr.as_str()).unwrap_or_else(|e| die(&format!("listen on {addr}: {e}")));
    let port = ln.local_addr().map(|a| a.port()).unwrap_or_else(|e| die(&e.to_string()));
    println!("PORT {port}");
    let _ = std::io::stdout().flush();
    eprintln!("bench-monoio http-server: listening on port {port}, driver {}", driver());
    std::thread::spawn(|| {
        let mut b = [0u8; 256];
        let mut stdin = std::io::stdin();
        while matches!(stdin.read(&mut b), Ok(n) if n > 0) {}
        println!("SERVED conns={} requests={}", ACCEPTED.load(Relaxed), ANSWERED.load(Relaxed));
        let _ = std::io::stdout().flush();
        exit(0);
    });
    loop {
        match ln.accept().await {
            Ok((s, _)) => {
                let _ = s.set_nodelay(true);
                ACCEPTED.fetch_add(1, Relaxed);
                monoio::spawn(http_conn(s));
            }
            Err(e) => {
                eprintln!("bench-monoio http-server: accept: {e}");
                monoio::time::sleep(Duration::from_millis(10)).await; // EMFILE and the like: do not spin
            }
        }
    }
}

fn driver() -> &'static str {
    if monoio::utils::detect_uring() {
        "uring"
    } else {
        "epoll"
    }
}

fn main() {
    raise_nofile();
    let argv: Vec<String> = std::env::args().collect();
    let usage = || -> ! {
        usage_exit("usage: bench-monoio ring|fiber-spawn|idle|echo-server|http-server [options]\n       (see docs/BENCHMARKS.md)")
    };
    if argv.len() < 2 {
        usage();
    }
    let bench = argv[1].clone();
    let known: &[&str] = match bench.as_str() {
        "ring" => &["threads", "hops", "via"],
        "fiber-spawn" => &["fibers", "batch"],
        "idle" => &["fibers", "park"],
        "echo-server" | "http-server" => &["listen"],
        _ => usage(),
    };
    let opts = Opts::parse(&argv[2..], known);
    let mut rt = monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
        .enable_timer()
        .build()
        .unwrap_or_else(|e| die(&format!("building the runtime: {e}")));
    rt.block_on(async move {
        match bench.as_str() {
            "ring" => ring(&opts).await,
            "fiber-spawn" => fiber_spawn(&opts).await,
            "idle" => idle(&opts).await,
            "echo-server" => echo_server(&opts).await,
            "http-server" => http_server(&opts).await,
            _ => unreachable!(),
        }
    });
}
