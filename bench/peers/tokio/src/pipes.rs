// SPDX-License-Identifier: MIT

//! pipes --style fiber: P pipes from tokio::net::unix::pipe::pipe() (pipe2 with
//! O_NONBLOCK, both ends registered edge-triggered with tokio's epoll driver),
//! and one task per pipe looping
//!
//! ```text
//! { write 1 byte; wait until readable; sleep D µs if D > 0; read 1 byte }
//! ```
//!
//! until a shared budget of M messages has been started, written literally:
//! try_write (awaiting writable() only on WouldBlock, which cannot happen with
//! one byte in flight), readable().await, tokio::time::sleep when D > 0,
//! try_read (awaiting readable() again only on WouldBlock).  tokio caches
//! readiness and clears it only when an operation returns WouldBlock, so
//! readable() returns at once whenever the last event said readable: in effect
//! it tries the read first and parks only when the read would block, as the
//! fiber style of BENCHMARKS.md allows.  Note tokio's timer wheel has 1 ms
//! granularity (a 1,000 µs sleep rounds up to the next millisecond tick).
//!
//! The tasks are spawned inside the timed span (they are part of the fiber
//! style); the pipes are made before it.  Each task returns how many messages
//! it received; the sum must equal M.

use std::io::ErrorKind;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::unix::pipe;

use crate::{usage_exit, Opts, Outcome, Span};

pub async fn run(o: &Opts) -> Outcome {
    let p = o.long("pipes", 1000);
    let m = o.long("messages", 1_000_000);
    let d = o.long("delay-us", 0);
    if o.str("style", "fiber") != "fiber" {
        usage_exit("pipes: only --style fiber is implemented by the tokio peer");
    }
    if o.str("backend", "epoll") != "epoll" {
        usage_exit("pipes: --backend: tokio always uses epoll (mio)");
    }
    if p < 1 || m < 0 || d < 0 {
        usage_exit("pipes: need --pipes >= 1, --messages >= 0, --delay-us >= 0");
    }
    let (p, m) = (p as usize, m as u64);
    let delay = (d > 0).then(|| Duration::from_micros(d as u64));

    let mut ends = Vec::with_capacity(p);
    for i in 0..p {
        ends.push(pipe::pipe().map_err(|e| format!("pipe {i} of {p}: {e}"))?);
    }

    let started = Arc::new(AtomicU64::new(0)); // the shared budget
    let mut sp = Span::begin();
    let mut tasks = Vec::with_capacity(p);
    for (tx, rx) in ends {
        let started = started.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            let mut buf = [0u8; 1];
            while started.fetch_add(1, Ordering::Relaxed) < m {
                // write 1 byte
                loop {
                    match tx.try_write(b"x") {
                        Ok(1) => break,
                        Ok(k) => return Err(format!("write returned {k}")),
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {
                            tx.writable().await.map_err(|e| e.to_string())?
                        }
                        Err(e) => return Err(format!("write: {e}")),
                    }
                }
                // wait until readable
                rx.readable().await.map_err(|e| e.to_string())?;
                if let Some(dl) = delay {
                    tokio::time::sleep(dl).await;
                }
                // read 1 byte
                loop {
                    match rx.try_read(&mut buf) {
                        Ok(1) if buf[0] == b'x' => break,
                        Ok(k) => return Err(format!("read returned {k} ({:?})", buf[0])),
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {
                            rx.readable().await.map_err(|e| e.to_string())?
                        }
                        Err(e) => return Err(format!("read: {e}")),
                    }
                }
                n += 1;
            }
            Ok::<u64, String>(n)
        }));
    }
    let mut counts = Vec::with_capacity(p);
    for t in tasks {
        counts.push(t.await.map_err(|e| format!("task failed: {e}"))??);
    }
    sp.end();

    let total: u64 = counts.iter().sum();
    let most = counts.iter().copied().max().unwrap_or(0);
    eprintln!("bench-tokio pipes: most messages through one pipe: {most} of {m}");
    if total != m {
        return Err(format!("received {total} messages, expected {m}"));
    }
    let msgs_per_s = m as f64 / sp.wall;
    let cpu_us_per_msg = if m > 0 {
        (sp.user + sp.sys) * 1e6 / m as f64
    } else {
        0.0
    };
    Ok((
        sp,
        format!(
            "pipes={p} messages={m} delay_us={d} msgs_per_s={msgs_per_s:.0} cpu_us_per_msg={cpu_us_per_msg:.4}"
        ),
    ))
}
