// SPDX-License-Identifier: MIT

//! blocking: F tasks each call a trivial function through tokio's blocking
//! pool (`spawn_blocking`), N calls in all.

use crate::{usage_exit, Opts, Outcome, Span};

async fn calls(left: std::sync::Arc<std::sync::atomic::AtomicI64>) -> Result<u64, String> {
    use std::sync::atomic::Ordering;
    let mut done = 0u64;
    loop {
        let i = left.fetch_sub(1, Ordering::Relaxed);
        if i <= 0 {
            return Ok(done);
        }
        let r = tokio::task::spawn_blocking(move || i + 1).await.map_err(|e| e.to_string())?;
        if r != i + 1 {
            return Err(format!("call {i} returned {r}"));
        }
        done += 1;
    }
}

async fn round(n: i64, f: i64) -> Result<u64, String> {
    let left = std::sync::Arc::new(std::sync::atomic::AtomicI64::new(n));
    let tasks: Vec<_> = (0..f).map(|_| tokio::spawn(calls(left.clone()))).collect();
    let mut done = 0;
    for t in tasks {
        done += t.await.map_err(|e| e.to_string())??;
    }
    Ok(done)
}

pub async fn run(o: &Opts) -> Outcome {
    let n = o.long("calls", 200_000);
    let f = o.long("fibers", 64);
    if n < 1 || f < 1 {
        usage_exit("blocking: --calls and --fibers must be positive");
    }
    round(f, f).await?; // warm: the pool's threads exist
    let mut sp = Span::begin();
    let done = round(n, f).await?;
    sp.end();
    if done != n as u64 {
        return Err(format!("{done} of {n} calls done"));
    }
    let keys = format!(
        "calls={n} fibers={f} us_per_call={:.3} cpu_us_per_call={:.3}",
        sp.wall * 1e6 / n as f64,
        (sp.user + sp.sys) * 1e6 / n as f64
    );
    Ok((sp, keys))
}
