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

use std::process::exit;

#[path = "../../rust-shared/harness.rs"]
#[allow(dead_code)] // its result() and fail(): this RESULT line names the flavour and its workers
mod harness;
pub(crate) use harness::{die, proc_status_kb, raise_nofile, usage_exit, Opts, Span};

/// The name in messages (the RESULT line's impl is the flavour's: tokio-ct or tokio-mt).
const IMPL: &str = "tokio";

pub(crate) fn rss_kb() -> i64 {
    proc_status_kb("VmRSS")
}

/// What a workload hands back: its span and its keys ("k=v k=v ..."), or the
/// reason its correctness check failed.
pub(crate) type Outcome = Result<(Span, String), String>;

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
    let known: Vec<&str> = known.iter().copied().chain(["flavor"]).collect();
    let opts = Opts::parse(args, &known);

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
                proc_status_kb("VmHWM")
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
