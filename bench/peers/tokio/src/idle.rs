// SPDX-License-Identifier: MIT

//! idle: F tasks, each blocked for good on the receive of its own
//! tokio::sync::oneshot channel (nothing is ever sent).  The senders are kept in
//! a Vec (dropping one would wake its task); the channels and the Vec are made
//! after the "before" reading, so they count, as a per-fiber channel does in
//! treadle's.  JoinHandles are dropped (the tasks are detached).
//!
//! Each task bumps a counter just before its first await; once all F have, a
//! settle of 200 ms lets the last polls return Pending.  Before each VmRSS
//! reading malloc_trim(0) hands free heap pages back to the kernel (the
//! counterpart of the GC run before the Go peer's readings; there is next to no
//! garbage here).
//!
//! bytes_per_fiber = (VmRSS with all F blocked - VmRSS before) * 1024 / F.
//! wall_s/user_s/sys_s cover spawning the F tasks until all have been polled.
//!
//! Note: a tokio task is a stackless state machine (here a few dozen bytes of
//! future inside the task cell), not a fiber with a stack.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;

use crate::{rss_kb, usage_exit, Opts, Outcome, Span};

fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory.
    unsafe {
        libc::malloc_trim(0);
    }
}

pub async fn run(o: &Opts) -> Outcome {
    let f = o.long("fibers", 100_000);
    if f < 1 {
        usage_exit("idle: need --fibers >= 1");
    }
    let f = f as usize;
    let ready = Arc::new(AtomicUsize::new(0));

    trim();
    let before = rss_kb();

    let mut sp = Span::begin();
    let mut senders: Vec<oneshot::Sender<()>> = Vec::with_capacity(f);
    for _ in 0..f {
        let (tx, rx) = oneshot::channel::<()>();
        senders.push(tx);
        let ready = ready.clone();
        tokio::spawn(async move {
            ready.fetch_add(1, Ordering::Release);
            let _ = rx.await; // blocked for good
        });
    }
    // Let the scheduler poll every spawned task once.
    while ready.load(Ordering::Acquire) < f {
        tokio::task::yield_now().await;
    }
    sp.end();

    tokio::time::sleep(Duration::from_millis(200)).await; // settle
    trim();
    let after = rss_kb();

    let alive = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    if alive != f {
        return Err(format!("{alive} tasks alive, expected {f}"));
    }
    if senders.iter().any(|s| s.is_closed()) {
        return Err("a task ended".into());
    }
    if before < 0 || after < 0 {
        return Err("cannot read VmRSS".into());
    }
    let bytes_per_fiber = (after - before) as f64 * 1024.0 / f as f64;
    std::mem::forget(senders); // keep every task blocked until the process exits
    Ok((
        sp,
        format!("fibers={f} rss_before_kb={before} rss_after_kb={after} bytes_per_fiber={bytes_per_fiber:.0}"),
    ))
}
