// SPDX-License-Identifier: MIT

//! ring: N tasks in a ring pass a token T times (the thread-ring of the
//! Benchmarks Game).  The main task hands the token, holding the count T, to
//! task 0 (not a hop).  A task that receives count v stops the run if v == 0
//! and otherwise passes v-1 to its successor: that pass is one hop.  So exactly
//! T hops are made and the run ends at task T mod N, which is checked.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Notify};

use crate::{usage_exit, Opts, Outcome, Span};

pub async fn run(o: &Opts) -> Outcome {
    let n = o.long("threads", 503);
    let hops = o.long("hops", 10_000_000);
    let via = o.str("via", "wake");
    if n < 1 || hops < 0 {
        usage_exit("ring: need --threads >= 1 and --hops >= 0");
    }
    let n = n as usize;
    let hops = hops as u64;

    // Any task may be the last; it reports its index here.
    let (fin_tx, mut fin_rx) = mpsc::unbounded_channel::<usize>();
    let mut sp;
    match via {
        // --via chan: tokio has no rendezvous (zero-capacity) channel; the
        // nearest is tokio::sync::mpsc with capacity 1 per neighbour, carrying
        // the count.  Unlike an unbuffered channel its send does not wait for
        // the receiver, which can only make it cheaper.
        "chan" => {
            let (txs, rxs): (Vec<_>, Vec<_>) = (0..n).map(|_| mpsc::channel::<u64>(1)).unzip();
            let first = txs[0].clone();
            let mut txs: Vec<Option<mpsc::Sender<u64>>> = txs.into_iter().map(Some).collect();
            for (i, mut rx) in rxs.into_iter().enumerate() {
                let out = txs[(i + 1) % n].take().unwrap();
                let fin = fin_tx.clone();
                tokio::spawn(async move {
                    // None: the task that ended the run dropped our sender.
                    while let Some(v) = rx.recv().await {
                        if v == 0 {
                            let _ = fin.send(i);
                            return;
                        }
                        if out.send(v - 1).await.is_err() {
                            return;
                        }
                    }
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await; // all in their recv
            sp = Span::begin();
            first
                .send(hops)
                .await
                .map_err(|_| "ring closed early".to_string())?;
        }
        // --via wake: each task parks until its predecessor wakes it, and the
        // count lives in one atomic shared by the ring (only the token holder
        // touches it).  The wake is tokio::sync::Notify, one per task, with
        // notify_one(): tokio's own primitive for "wake the task waiting here".
        // It stores a permit when nobody waits (a wake before the park is not
        // lost) and otherwise wakes the one waiter directly; it carries no data.
        // A hand-written slot (a Mutex<(flag, Option<Waker>)> per task calling
        // the bare Waker::wake that every tokio primitive ends in) measured
        // slower (~84 vs ~64 ns per hop: it clones the Waker
        // at every park, Notify does not), a oneshot per hop would allocate on
        // every hop, and an mpsc(1) per task is the --via chan form.
        "wake" => {
            let token = Arc::new(AtomicU64::new(0));
            let wakes: Vec<Arc<Notify>> = (0..n).map(|_| Arc::new(Notify::new())).collect();
            for i in 0..n {
                let me = wakes[i].clone();
                let next = wakes[(i + 1) % n].clone();
                let token = token.clone();
                let fin = fin_tx.clone();
                tokio::spawn(async move {
                    loop {
                        me.notified().await; // park until woken
                        let v = token.load(Ordering::Acquire);
                        if v == 0 {
                            let _ = fin.send(i);
                            return;
                        }
                        token.store(v - 1, Ordering::Release);
                        next.notify_one(); // wake the successor
                    }
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            sp = Span::begin();
            token.store(hops, Ordering::Release);
            wakes[0].notify_one();
        }
        _ => usage_exit("ring: --via must be wake or chan"),
    }
    let last = fin_rx.recv().await.ok_or("no task ended the run")?;
    sp.end();

    let want = (hops % n as u64) as usize;
    if last != want {
        return Err(format!("token stopped at task {last}, expected {want}"));
    }
    let per_hop = |s: f64| if hops > 0 { s * 1e9 / hops as f64 } else { 0.0 };
    let (ns_per_hop, cpu_ns_per_hop) = (per_hop(sp.wall), per_hop(sp.user + sp.sys));
    Ok((
        sp,
        format!("threads={n} hops={hops} via={via} ns_per_hop={ns_per_hop:.2} cpu_ns_per_hop={cpu_ns_per_hop:.2}"),
    ))
}
