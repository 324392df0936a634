// SPDX-License-Identifier: MIT

//! bench-tokio: the tokio peer of treadle-bench for the fiber-level workloads of
//! docs/BENCHMARKS.md (ring, chan, idle, pipes --style fiber), with the same
//! command line and the same RESULT line as the C driver, plus the runtime
//! flavour:
//!
//! ```text
//! bench-tokio ring  --threads 503 --hops T [--via wake|chan] [--flavor current_thread|multi_thread]
//! bench-tokio chan  --hops T                                  [--flavor ...]
//! bench-tokio idle  --fibers F                                [--flavor ...]
//! bench-tokio pipes --pipes P --messages M --delay-us D [--style fiber] [--flavor ...]
//! bench-tokio xchan --hops T                                  [--flavor ...]
//! bench-tokio blocking --calls N --fibers F                   [--flavor ...]
//! bench-tokio echo-server [--listen ADDR]                     [--flavor ...]
//! ```
//!
//! echo-server is not a timed workload: it prints "PORT n", serves until stdin
//! ends and prints no RESULT line (bench/drivers/echo_driver.py measures it).
//!
//! impl is `tokio-ct` (current_thread: one thread runs every task and the I/O
//! and timer drivers) or `tokio-mt` (multi_thread: worker_threads defaults to
//! the number of CPUs; its value is reported as the key workers=N).  Everything
//! but the RESULT line goes to stderr.  A run that fails its own correctness
//! check exits 1 without a RESULT line; a malformed command line exits 2.

mod chan;
mod echo;
mod idle;
mod pipes;
mod ring;
mod xchan;
mod blocking;

use std::collections::HashMap;
use std::process::exit;
use std::time::Instant;

/// Brackets the work: monotonic wall time (Instant is CLOCK_MONOTONIC) and
/// getrusage(RUSAGE_SELF) deltas, which cover every thread of the process
/// (tokio's worker and blocking threads included).
pub struct Span {
    t0: Instant,
    ru0: libc::rusage,
    pub wall: f64,
    pub user: f64,
    pub sys: f64,
}

fn rusage_self() -> libc::rusage {
    // SAFETY: getrusage fills the struct it is given; all-zero is a valid rusage.
    unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut ru) != 0 {
            die(&format!("getrusage: {}", std::io::Error::last_os_error()));
        }
        ru
    }
}

fn tv_seconds(tv: libc::timeval) -> f64 {
    tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6
}

impl Span {
    pub fn begin() -> Span {
        let ru0 = rusage_self();
        Span {
            t0: Instant::now(),
            ru0,
            wall: 0.0,
            user: 0.0,
            sys: 0.0,
        }
    }

    pub fn end(&mut self) {
        self.wall = self.t0.elapsed().as_secs_f64();
        let ru = rusage_self();
        self.user = tv_seconds(ru.ru_utime) - tv_seconds(self.ru0.ru_utime);
        self.sys = tv_seconds(ru.ru_stime) - tv_seconds(self.ru0.ru_stime);
    }
}

/// A "Vm...:" field of /proc/self/status in KiB, or -1.
fn proc_status_kb(field: &str) -> i64 {
    let Ok(s) = std::fs::read_to_string("/proc/self/status") else {
        return -1;
    };
    for line in s.lines() {
        if let Some(rest) = line.strip_prefix(field).and_then(|r| r.strip_prefix(':')) {
            if let Some(v) = rest.split_whitespace().next().and_then(|v| v.parse().ok()) {
                return v;
            }
        }
    }
    -1
}

pub fn peak_rss_kb() -> i64 {
    proc_status_kb("VmHWM")
}

pub fn rss_kb() -> i64 {
    proc_status_kb("VmRSS")
}

/// What a workload hands back: its span and its keys ("k=v k=v ..."), or the
/// reason its correctness check failed.
pub type Outcome = Result<(Span, String), String>;

pub fn die(msg: &str) -> ! {
    eprintln!("bench-tokio: {msg}");
    exit(1)
}

pub fn usage_exit(msg: &str) -> ! {
    eprintln!("bench-tokio: {msg}");
    exit(2)
}

/// "--name value" pairs after the workload name.
pub struct Opts(HashMap<String, String>);

impl Opts {
    fn parse(args: &[String], known: &[&str]) -> Opts {
        let mut m = HashMap::new();
        let mut i = 0;
        while i < args.len() {
            let a = &args[i];
            let Some(name) = a.strip_prefix("--") else {
                usage_exit(&format!(
                    "bad argument {a:?} (options are --name value pairs)"
                ))
            };
            if i + 1 >= args.len() {
                usage_exit(&format!("option {a} needs a value"));
            }
            if name != "flavor" && !known.contains(&name) {
                usage_exit(&format!("unknown option --{name}"));
            }
            m.insert(name.to_string(), args[i + 1].clone());
            i += 2;
        }
        Opts(m)
    }

    pub fn long(&self, name: &str, dflt: i64) -> i64 {
        match self.0.get(name) {
            None => dflt,
            Some(v) => v
                .parse()
                .unwrap_or_else(|_| usage_exit(&format!("--{name}: not an integer: {v:?}"))),
        }
    }

    pub fn str<'a>(&'a self, name: &str, dflt: &'a str) -> &'a str {
        self.0.get(name).map(|s| s.as_str()).unwrap_or(dflt)
    }
}

/// Raise the soft RLIMIT_NOFILE to the hard limit (pipes need 2 fds each).
fn raise_nofile() {
    // SAFETY: plain system calls on a local struct.
    unsafe {
        let mut rl: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) != 0 {
            die(&format!("getrlimit: {}", std::io::Error::last_os_error()));
        }
        if rl.rlim_cur < rl.rlim_max {
            rl.rlim_cur = rl.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &rl) != 0 {
                die(&format!("setrlimit: {}", std::io::Error::last_os_error()));
            }
        }
    }
}

fn main() {
    raise_nofile();
    let argv: Vec<String> = std::env::args().collect();
    let usage = || -> ! {
        usage_exit(
            "usage: bench-tokio ring|chan|idle|pipes|xchan|blocking|echo-server [options] [--flavor current_thread|multi_thread]\n       (see docs/BENCHMARKS.md)",
        )
    };
    if argv.len() < 2 {
        usage();
    }
    let bench = argv[1].as_str();
    let args = &argv[2..];
    let known: &[&str] = match bench {
        "ring" => &["threads", "hops", "via"],
        "chan" => &["hops"],
        "idle" => &["fibers"],
        "pipes" => &["pipes", "messages", "delay-us", "style", "backend"],
        "xchan" => &["hops"],
        "blocking" => &["calls", "fibers"],
        "echo-server" => &["listen"],
        _ => usage(),
    };
    let opts = Opts::parse(args, known);

    let (rt, impl_name, workers) = match opts.str("flavor", "current_thread") {
        "current_thread" => (
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build(),
            "tokio-ct",
            1,
        ),
        "multi_thread" => {
            // tokio's own default: one worker per CPU.
            let n = std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1);
            (
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(n)
                    .enable_all()
                    .build(),
                "tokio-mt",
                n,
            )
        }
        f => usage_exit(&format!(
            "--flavor must be current_thread or multi_thread, not {f:?}"
        )),
    };
    let rt = rt.unwrap_or_else(|e| die(&format!("building the runtime: {e}")));

    let outcome = rt.block_on(async {
        match bench {
            "ring" => ring::run(&opts).await,
            "chan" => chan::run(&opts).await,
            "idle" => idle::run(&opts).await,
            "pipes" => pipes::run(&opts).await,
            "xchan" => xchan::run(&opts).await,
            "blocking" => blocking::run(&opts).await,
            "echo-server" => echo::serve(&opts).await,
            _ => unreachable!(),
        }
    });
    match outcome {
        Ok((sp, keys)) => {
            println!(
                "RESULT impl={impl_name} bench={bench} workers={workers} {keys} wall_s={:.6} user_s={:.6} sys_s={:.6} peak_rss_kb={}",
                sp.wall,
                sp.user,
                sp.sys,
                peak_rss_kb()
            );
            // Tasks still parked (ring, chan, idle) are dropped with the runtime;
            // exit without waiting for that.
            std::mem::forget(rt);
            exit(0);
        }
        Err(why) => {
            eprintln!("bench-tokio {bench}: CHECK FAILED: {why}");
            exit(1);
        }
    }
}
