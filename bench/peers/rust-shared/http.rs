// SPDX-License-Identifier: MIT

//! The HTTP of http-server, without its I/O: one file for bench-may and
//! bench-monoio (each takes it in as its `http` module, by #[path]), and the
//! same parser and answers as bench-st's and bench-boost-fiber's
//! (bench/peers/st/st_http.c).
//!
//! A connection's input is a buffer of IN_CAP bytes.  Every request head (up
//! to its "\r\n\r\n") that a read completes is answered, so that pipelined
//! requests arriving in one read are answered together, in one write, and a
//! head split across reads waits in the buffer for its end.  The answer to
//! GET / is the bytes examples/httpd sends (the same headers in the same
//! order, a Date rebuilt when the second of the wall clock changes, looked at
//! once per read), kept open for HTTP/1.1 and closed, with "Connection:
//! close", for HTTP/1.0 or a Connection header naming close; any other target
//! is 404.  Anything else -- a method other than GET, a malformed request
//! line or header, a body (Content-Length other than 0, Transfer-Encoding), a
//! head that does not fit the buffer -- is answered 400 and the connection
//! closed, as httpd's own error replies are worded.

use std::time::{SystemTime, UNIX_EPOCH};

/// A connection's input: a request head must fit.
pub const IN_CAP: usize = 16 * 1024;
/// The answers to one read, sent together.
pub const OUT_CAP: usize = 16 * 1024;
/// Room kept for an answer other than the prepared ones.
const OTHER_MAX: usize = 256;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Answer {
    Hello,
    NotFound,
    Bad,
}

/// What the connection does after `Conn::answer`: in each case `out`, if
/// not empty, is sent first.
pub enum Step {
    /// Read more.
    Read,
    /// `out` was full: call `answer` again.
    More,
    /// Close the connection.
    Close,
}

/// A connection's state: its input and its copy of the answers (each
/// connection keeps its own, so that nothing is shared between coroutines
/// or tasks).
pub struct Conn {
    /// IN_CAP bytes (its capacity) to read into; the first `held` are the
    /// input not answered yet, from the start of a head.  Its length is
    /// `held` or more (bench-may makes it IN_CAP zeroes, bench-monoio reads
    /// into its spare capacity).
    pub input: Vec<u8>,
    pub held: usize,
    /// Of the bytes held, those searched for a head's end without finding one.
    scanned: usize,
    sec: i64,
    date: String,
    hello: Vec<u8>,
    hello_close: Vec<u8>,
    /// Requests answered.
    pub answered: u64,
}

impl Conn {
    pub fn new(input: Vec<u8>) -> Conn {
        assert!(input.capacity() >= IN_CAP);
        Conn {
            input,
            held: 0,
            scanned: 0,
            sec: -1,
            date: String::new(),
            hello: Vec::new(),
            hello_close: Vec::new(),
            answered: 0,
        }
    }

    /// httpd's date_refresh (examples/httpd/server.c), byte for byte: after
    /// each read.
    pub fn date_refresh(&mut self) {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
        if now == self.sec {
            return;
        }
        self.sec = now;
        self.date = http_date(now);
        self.hello = format!(
            "HTTP/1.1 200 OK\r\nServer: treadle\r\nDate: {}\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\n\
             Hello, World!",
            self.date
        )
        .into_bytes();
        self.hello_close = format!(
            "HTTP/1.1 200 OK\r\nServer: treadle\r\nDate: {}\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\
             Connection: close\r\n\r\nHello, World!",
            self.date
        )
        .into_bytes();
    }

    /// Answers the complete heads in `input` into `out` (at most OUT_CAP
    /// bytes), keeping an unfinished one.
    pub fn answer(&mut self, out: &mut Vec<u8>) -> Step {
        let mut start = 0;
        let held = self.held;
        let step = loop {
            let Some(p) = find(&self.input[self.scanned..held], b"\r\n\r\n") else {
                self.scanned = if held - start > 3 { held - 3 } else { start };
                if start == 0 && held == IN_CAP {
                    self.put(out, Answer::Bad, true); // a head larger than the buffer
                    break Step::Close;
                }
                break Step::Read;
            };
            if out.len() + self.hello_close.len().max(OTHER_MAX) > OUT_CAP {
                break Step::More;
            }
            let end = self.scanned + p + 4;
            let (what, closes) = parse_head(&self.input[start..end]);
            let closes = closes || what == Answer::Bad;
            self.put(out, what, closes);
            self.answered += 1;
            start = end;
            self.scanned = end;
            if closes {
                break Step::Close;
            }
        };
        self.input.copy_within(start..held, 0);
        self.held -= start;
        self.scanned -= start;
        step
    }

    fn put(&self, out: &mut Vec<u8>, what: Answer, closes: bool) {
        match what {
            Answer::Hello => out.extend_from_slice(if closes { &self.hello_close } else { &self.hello }),
            _ => {
                let (status, reason) = if what == Answer::NotFound { (404, "Not Found") } else { (400, "Bad Request") };
                let body = format!("{status} {reason}\n");
                out.extend_from_slice(
                    format!(
                        "HTTP/1.1 {status} {reason}\r\nServer: treadle\r\nDate: {}\r\nContent-Type: text/plain\r\n\
                         Content-Length: {}\r\n{}\r\n{body}",
                        self.date,
                        body.len(),
                        if closes { "Connection: close\r\n" } else { "" }
                    )
                    .as_bytes(),
                );
            }
        }
    }
}

/// "Sun, 06 Nov 1994 08:49:37 GMT", as httpd's strftime makes it.
fn http_date(secs: i64) -> String {
    let t = secs as libc::time_t;
    let mut buf = [0u8; 32];
    // SAFETY: gmtime_r and strftime on local buffers of the sizes given.
    let n = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        libc::gmtime_r(&t, &mut tm);
        libc::strftime(buf.as_mut_ptr().cast(), buf.len(), c"%a, %d %b %Y %H:%M:%S GMT".as_ptr(), &tm)
    };
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

fn find(h: &[u8], pat: &[u8]) -> Option<usize> {
    h.windows(pat.len()).position(|w| w == pat)
}

fn is_tchar(b: u8) -> bool {
    b > b' ' && b < 0x7f && !b"\"(),/:;<=>?@[\\]{}".contains(&b)
}

fn trim(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

/// The answer to the complete head h (it ends in "\r\n\r\n"), and whether the
/// connection closes after it.
fn parse_head(h: &[u8]) -> (Answer, bool) {
    const BAD: (Answer, bool) = (Answer::Bad, true);
    let end = h.len() - 2; // the empty line that ends the head
    let eol = find(h, b"\r\n").unwrap_or(end);
    // "GET " target " HTTP/1.x"
    let line = &h[..eol];
    if line.len() < 14 || !line.starts_with(b"GET ") {
        return BAD;
    }
    let Some(sp) = line[4..].iter().position(|&b| b == b' ').filter(|&sp| sp > 0) else {
        return BAD;
    };
    let (target, version) = (&line[4..4 + sp], &line[5 + sp..]);
    if version.len() != 8 || !version.starts_with(b"HTTP/1.") || !matches!(version[7], b'0' | b'1') {
        return BAD;
    }
    if target.iter().any(|&b| b <= b' ' || b == 0x7f) {
        return BAD;
    }
    let mut closes = version[7] == b'0';
    let mut pos = eol + 2;
    while pos < end {
        let e = pos + find(&h[pos..end + 2], b"\r\n").unwrap_or(end - pos);
        let line = &h[pos..e];
        let Some(colon) = line.iter().position(|&b| b == b':').filter(|&c| c > 0) else {
            return BAD;
        };
        let name = &line[..colon];
        if !name.iter().all(|&b| is_tchar(b)) {
            return BAD;
        }
        let value = &line[colon + 1..];
        if value.iter().any(|&b| b == b'\r' || b == b'\n' || b == 0) {
            return BAD;
        }
        let value = trim(value);
        if name.eq_ignore_ascii_case(b"connection") {
            if value.split(|&b| b == b',').any(|t| trim(t).eq_ignore_ascii_case(b"close")) {
                closes = true;
            }
        } else if name.eq_ignore_ascii_case(b"content-length") {
            if value != b"0" {
                return BAD; // no bodies
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            return BAD;
        }
        pos = e + 2;
    }
    (if target == b"/" { Answer::Hello } else { Answer::NotFound }, closes)
}
