// SPDX-License-Identifier: MIT

//! xchan: one task sends 1..T over a bounded mpsc channel of 1024 to another,
//! which sums them and checks the sum.  Run it with --flavor multi_thread
//! (two workers on two CPUs), so that both may run at once, as treadle's
//! two loops do.

use tokio::sync::mpsc;

use crate::{usage_exit, Opts, Outcome, Span};

pub async fn run(o: &Opts) -> Outcome {
    let hops = o.long("hops", 10_000_000);
    if hops < 1 {
        usage_exit("xchan: need --hops >= 1");
    }
    let hops = hops as u64;
    let (tx, mut rx) = mpsc::channel::<u64>(1024);
    let mut sp = Span::begin();
    let consumer = tokio::spawn(async move {
        let mut sum = 0u64;
        while let Some(v) = rx.recv().await {
            sum += v;
        }
        sum
    });
    let producer = tokio::spawn(async move {
        for i in 1..=hops {
            if tx.send(i).await.is_err() {
                return;
            }
        }
    });
    producer.await.map_err(|e| e.to_string())?;
    let sum = consumer.await.map_err(|e| e.to_string())?;
    sp.end();
    if sum != hops * (hops + 1) / 2 {
        return Err(format!("sum {sum}, expected {}", hops * (hops + 1) / 2));
    }
    let keys = format!(
        "hops={hops} ns_per_msg={:.2} msgs_per_s={:.0} cpu_ns_per_msg={:.2}",
        sp.wall * 1e9 / hops as f64,
        hops as f64 / sp.wall,
        (sp.user + sp.sys) * 1e9 / hops as f64
    );
    Ok((sp, keys))
}
