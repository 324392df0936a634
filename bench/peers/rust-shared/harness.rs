// SPDX-License-Identifier: MIT

//! What bench-may, bench-monoio and bench-tokio share around their workloads
//! (each takes it in as its `harness` module, by #[path], and names itself in
//! IMPL): the span of wall and CPU time a workload is measured over, the
//! RESULT line (bench-tokio prints its own, which names its flavour), errors,
//! "--name value" options and the fd limit.

use std::collections::HashMap;
use std::io::Write;
use std::process::exit;
use std::time::Instant;

/// Brackets the work: monotonic wall time and getrusage(RUSAGE_SELF) deltas,
/// which cover every thread of the process (the runtime's own included).
pub(crate) struct Span {
    t0: Instant,
    ru0: libc::rusage,
    pub(crate) wall: f64,
    pub(crate) user: f64,
    pub(crate) sys: f64,
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
    pub(crate) fn begin() -> Span {
        let ru0 = rusage_self();
        Span { t0: Instant::now(), ru0, wall: 0.0, user: 0.0, sys: 0.0 }
    }

    pub(crate) fn end(&mut self) {
        self.wall = self.t0.elapsed().as_secs_f64();
        let ru = rusage_self();
        self.user = tv_seconds(ru.ru_utime) - tv_seconds(self.ru0.ru_utime);
        self.sys = tv_seconds(ru.ru_stime) - tv_seconds(self.ru0.ru_stime);
    }
}

/// A "Vm...:" field of /proc/self/status in KiB, or -1.
pub(crate) fn proc_status_kb(field: &str) -> i64 {
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

pub(crate) fn die(msg: &str) -> ! {
    eprintln!("bench-{}: {msg}", crate::IMPL);
    exit(1)
}

pub(crate) fn usage_exit(msg: &str) -> ! {
    eprintln!("bench-{}: {msg}", crate::IMPL);
    exit(2)
}

/// Prints the RESULT line and ends the process (coroutines or tasks still
/// parked are left to the exit).
pub(crate) fn result(bench: &str, sp: &Span, keys: &str) -> ! {
    println!(
        "RESULT impl={} bench={bench} {keys} wall_s={:.6} user_s={:.6} sys_s={:.6} peak_rss_kb={}",
        crate::IMPL,
        sp.wall,
        sp.user,
        sp.sys,
        proc_status_kb("VmHWM")
    );
    let _ = std::io::stdout().flush();
    exit(0)
}

pub(crate) fn fail(bench: &str, why: &str) -> ! {
    eprintln!("bench-{} {bench}: CHECK FAILED: {why}", crate::IMPL);
    exit(1)
}

/// "--name value" pairs after the workload name.
pub(crate) struct Opts(HashMap<String, String>);

impl Opts {
    pub(crate) fn parse(args: &[String], known: &[&str]) -> Opts {
        let mut m = HashMap::new();
        let mut i = 0;
        while i < args.len() {
            let a = &args[i];
            let Some(name) = a.strip_prefix("--") else {
                usage_exit(&format!("bad argument {a:?} (options are --name value pairs)"))
            };
            if i + 1 >= args.len() {
                usage_exit(&format!("option {a} needs a value"));
            }
            if !known.contains(&name) {
                usage_exit(&format!("unknown option --{name}"));
            }
            m.insert(name.to_string(), args[i + 1].clone());
            i += 2;
        }
        Opts(m)
    }

    pub(crate) fn long(&self, name: &str, dflt: i64) -> i64 {
        match self.0.get(name) {
            None => dflt,
            Some(v) => v.parse().unwrap_or_else(|_| usage_exit(&format!("--{name}: not an integer: {v:?}"))),
        }
    }

    pub(crate) fn str<'a>(&'a self, name: &str, dflt: &'a str) -> &'a str {
        self.0.get(name).map(|s| s.as_str()).unwrap_or(dflt)
    }
}

/// Raise the soft RLIMIT_NOFILE to the hard limit (pipes and socket pairs need 2 fds each).
pub(crate) fn raise_nofile() {
    // SAFETY: plain system calls on a local struct.
    unsafe {
        let mut rl: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) == 0 && rl.rlim_cur < rl.rlim_max {
            rl.rlim_cur = rl.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &rl);
        }
    }
}
