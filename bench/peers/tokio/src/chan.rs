// SPDX-License-Identifier: MIT

//! chan: two tasks pass a value back and forth.  A hop is one send matched by
//! one receive.  The main task puts the value 0 in play (not a hop); a task that
//! receives v stops the run if v == T and otherwise sends v+1 to the other: that
//! send and the other's receive of it are one hop.  So exactly T hops are made,
//! which the final value checks.
//!
//! tokio has no unbuffered (rendezvous) channel, and an mpsc Receiver has a
//! single owner, so one channel cannot carry the value both ways as in Go or
//! treadle.  The mechanism is a pair of tokio::sync::mpsc channels of capacity 1,
//! one per direction: the cheapest public channel that carries a value between
//! two tasks more than once (a oneshot would be allocated per hop).  A capacity-1
//! send does not wait for the receiver, which can only favour tokio.

use std::time::Duration;

use tokio::sync::mpsc;

use crate::{usage_exit, Opts, Outcome, Span};

pub async fn run(o: &Opts) -> Outcome {
    let hops = o.long("hops", 10_000_000);
    if hops < 0 {
        usage_exit("chan: need --hops >= 0");
    }
    let hops = hops as u64;

    let (to_a, a_in) = mpsc::channel::<u64>(1);
    let (to_b, b_in) = mpsc::channel::<u64>(1);
    let (fin_tx, mut fin_rx) = mpsc::unbounded_channel::<u64>();
    let kick = to_a.clone();
    for (mut rx, out) in [(a_in, to_b), (b_in, to_a)] {
        let fin = fin_tx.clone();
        tokio::spawn(async move {
            while let Some(v) = rx.recv().await {
                if v == hops {
                    let _ = fin.send(v);
                    return;
                }
                if out.send(v + 1).await.is_err() {
                    return;
                }
            }
        });
    }
    tokio::time::sleep(Duration::from_millis(20)).await; // both in their recv

    let mut sp = Span::begin();
    kick.send(0)
        .await
        .map_err(|_| "channel closed early".to_string())?;
    let last = fin_rx.recv().await.ok_or("no task ended the run")?;
    sp.end();

    if last != hops {
        return Err(format!("final value {last}, expected {hops}"));
    }
    let per_hop = |s: f64| if hops > 0 { s * 1e9 / hops as f64 } else { 0.0 };
    let (ns_per_hop, cpu_ns_per_hop) = (per_hop(sp.wall), per_hop(sp.user + sp.sys));
    Ok((
        sp,
        format!("hops={hops} ns_per_hop={ns_per_hop:.2} cpu_ns_per_hop={cpu_ns_per_hop:.2}"),
    ))
}
