// SPDX-License-Identifier: MIT

//! echo-server: the tokio peer of treadle-bench's echo-server (docs/BENCHMARKS.md,
//! "echo"), with the same contract: listen (default 127.0.0.1:0), print
//! "PORT n" on stdout, serve until stdin reaches end of file, exit 0.  A task
//! per connection echoes what arrives into a 16 KiB buffer, as treadle's and
//! Go's servers do, with TCP_NODELAY set (Go's default; treadle sets it).
//! Reads and writes are tokio's readiness form: try_read / try_write, awaiting
//! readable() / writable() only on WouldBlock (without the "io-util" feature,
//! whose AsyncReadExt::read is the same poll underneath).  Run with --flavor
//! current_thread for the one-thread figure.
//!
//! stdin is read by a plain thread (blocked in read(2), no CPU) that exits the
//! process at end of file.  The client is treadle-bench echo for every server;
//! bench/drivers/echo_driver.py measures the server's CPU time from /proc.

use std::io::{ErrorKind, Read};

use tokio::net::{TcpListener, TcpStream};

use crate::{Opts, Outcome};

async fn echo_conn(s: TcpStream) {
    let _ = s.set_nodelay(true);
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match s.try_read(&mut buf) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if s.readable().await.is_err() {
                    return;
                }
                continue;
            }
            Err(_) => return,
        };
        let mut off = 0;
        while off < n {
            match s.try_write(&buf[off..n]) {
                Ok(w) => off += w,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if s.writable().await.is_err() {
                        return;
                    }
                }
                Err(_) => return,
            }
        }
    }
}

pub async fn serve(o: &Opts) -> Outcome {
    let addr = o.str("listen", "127.0.0.1:0");
    let ln = TcpListener::bind(addr)
        .await
        .map_err(|e| format!("listen on {addr}: {e}"))?;
    let port = ln.local_addr().map_err(|e| e.to_string())?.port();
    println!("PORT {port}");
    std::thread::spawn(|| {
        let mut b = [0u8; 256];
        let mut stdin = std::io::stdin();
        while matches!(stdin.read(&mut b), Ok(n) if n > 0) {}
        std::process::exit(0);
    });
    loop {
        match ln.accept().await {
            Ok((s, _)) => {
                tokio::spawn(echo_conn(s));
            }
            Err(e) => {
                eprintln!("bench-tokio echo-server: accept: {e}");
                // EMFILE and the like: do not spin.
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        }
    }
}
