#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""examples/httpd over HTTPS (--tls-cert, --tls-key), against real peers:
curl, Python's ssl module and `openssl s_client`, with certificates that
tests/tls/make-certs.sh makes at run time.  On one loop and on two.

- served with ALPN http/1.1 and TLS 1.3, verified against the test CA;
- plaintext HTTP to the TLS port: closed, the server keeps serving, and it
  says nothing about it;
- a ClientHello written one byte at a time: served;
- 2,000 clients that connect and say nothing: all closed at the handshake
  (first-byte) deadline, a normal client served meanwhile, the server's fds
  back to where they were;
- a TLS 1.2 renegotiation (s_client's R): refused, the server keeps serving;
- garbage after the handshake, a truncated record: closed, keeps serving;
- an expired or wrong-host certificate: curl and Python refuse it, with the
  reason; accepted when told not to verify;
- a missing key, a key that does not match: httpd does not start, naming the
  file.

    test_httpd_tls.py PATH/TO/httpd MAKE_CERTS_SH
Exits 77 (skipped) where `openssl` or curl is missing.
"""
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time

HTTPD, MAKE_CERTS = sys.argv[1], sys.argv[2]
BOUND = 60.0  # seconds: a bound on what must happen, not a delay
SILENT = 2000


def fail(msg, p=None):
    if p and p.poll() is None:
        p.kill()
    sys.exit(f"test_httpd_tls: {msg}")


def start(d, cert="server.pem", key="server.key", loops=1, extra=()):
    p = subprocess.Popen([HTTPD, "--listen", "127.0.0.1:0", "--loops", str(loops), "--tls-cert",
                          os.path.join(d, cert), "--tls-key", os.path.join(d, key), *extra],
                         stderr=subprocess.PIPE, text=True)
    line = p.stderr.readline()
    m = re.search(r"\(port (\d+)\)", line)
    if not m:
        fail(f"unexpected start line {line!r}", p)
    return p, int(m.group(1))


def stop(p):
    p.send_signal(signal.SIGTERM)
    rc = p.wait(timeout=BOUND)
    rest = p.stderr.read()
    if rc != 0:
        fail(f"exit {rc}: {rest}")
    return rest


def context(d, verify=True):
    ctx = ssl.create_default_context(cafile=os.path.join(d, "ca.pem"))
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


def get_python(d, port, host="localhost", verify=True):
    with socket.create_connection(("127.0.0.1", port), timeout=BOUND) as raw:
        with context(d, verify).wrap_socket(raw, server_hostname=host) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data = b""
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
            return data, s.selected_alpn_protocol(), s.version()


def curl(d, port, *args):
    return subprocess.run(["curl", "-sS", "--max-time", str(BOUND), "--cacert", os.path.join(d, "ca.pem"), *args,
                           f"https://localhost:{port}/"], capture_output=True, text=True)


def served(d, port):
    r = curl(d, port)
    return r.returncode == 0 and r.stdout == "Hello, World!"


def closed_by_server(s):
    s.settimeout(None)
    try:
        return s.recv(1, socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


def read_until_closed(s):
    s.settimeout(BOUND)
    data = b""
    try:
        while True:
            chunk = s.recv(4096)
            if not chunk:
                return data
            data += chunk
    except ConnectionResetError:
        return data


def server_fds(p):
    return len(os.listdir(f"/proc/{p.pid}/fd"))


def basics(d, loops):
    p, port = start(d, loops=loops)
    # curl, verifying.
    r = curl(d, port, "-w", " %{http_version}")
    if r.returncode != 0 or r.stdout != "Hello, World! 1.1":
        fail(f"curl: {r.returncode} {r.stdout!r} {r.stderr!r}", p)
    # Without the CA, curl refuses (60: the peer's certificate did not verify).
    r = subprocess.run(["curl", "-sS", "--max-time", str(BOUND), f"https://localhost:{port}/"],
                       capture_output=True, text=True)
    if r.returncode != 60:
        fail(f"curl without the CA: {r.returncode} {r.stderr!r}", p)
    # Python's ssl: ALPN and version.
    data, alpn, version = get_python(d, port)
    if not data.endswith(b"Hello, World!") or alpn != "http/1.1" or version != "TLSv1.3":
        fail(f"python: {data[-40:]!r} {alpn} {version}", p)
    # Plaintext HTTP to the TLS port: closed (perhaps with an alert), never answered in HTTP.
    with socket.create_connection(("127.0.0.1", port), timeout=BOUND) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        got = read_until_closed(s)
        if b"HTTP/1.1" in got:
            fail(f"plaintext was answered in plaintext: {got!r}", p)
    # Garbage after a handshake; a truncated record: closed, and serving goes on.
    for junk in (b"\x01\x02\x03 garbage, not a record", b"\x17\x03\x03\x00\x64" + b"0123456789"):
        raw = socket.create_connection(("127.0.0.1", port), timeout=BOUND)
        obj_in, obj_out = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = context(d).wrap_bio(obj_in, obj_out, server_hostname="localhost")
        handshake_over(raw, tls, obj_in, obj_out)
        try:
            raw.sendall(junk)
            raw.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server may have closed already, at the first bad byte
        read_until_closed(raw)
        raw.close()
    # A ClientHello one byte at a time.
    raw = socket.create_connection(("127.0.0.1", port), timeout=BOUND)
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    obj_in, obj_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context(d).wrap_bio(obj_in, obj_out, server_hostname="localhost")
    handshake_over(raw, tls, obj_in, obj_out, one_byte=True)
    if tls.selected_alpn_protocol() != "http/1.1":
        fail("the one-byte hello did not complete", p)
    raw.close()
    if not served(d, port):
        fail("not serving after plaintext, garbage and a one-byte hello", p)
    rest = stop(p)
    if len(rest.splitlines()) > 3:
        fail(f"the server said something per bad client: {rest!r}")


def handshake_over(raw, tls, obj_in, obj_out, one_byte=False):
    """Drive tls (an SSLObject) over the socket raw until its handshake ends."""
    while True:
        try:
            tls.do_handshake()
            out = obj_out.read()
            if out:
                raw.sendall(out)
            return
        except ssl.SSLWantReadError:
            out = obj_out.read()
            if one_byte:
                for i in range(len(out)):
                    raw.sendall(out[i:i + 1])
                    time.sleep(0.001)
            elif out:
                raw.sendall(out)
            data = raw.recv(65536)
            if not data:
                raise ConnectionError("closed during the handshake")
            obj_in.write(data)


def silent_clients(d):
    p, port = start(d, extra=("--first-byte-timeout", "1"))
    time.sleep(0.2)
    base = server_fds(p)
    quiet = []
    for _ in range(SILENT):
        quiet.append(socket.create_connection(("127.0.0.1", port), timeout=BOUND))
    # Normal clients are served while the silent ones wait.
    for _ in range(5):
        if not served(d, port):
            fail("a normal client was not served among the silent ones", p)
    end = time.monotonic() + BOUND
    while time.monotonic() < end and not all(closed_by_server(s) for s in quiet):
        time.sleep(0.1)
    if not all(closed_by_server(s) for s in quiet):
        fail(f"{sum(not closed_by_server(s) for s in quiet)} silent clients not closed at the deadline", p)
    for s in quiet:
        s.close()
    end = time.monotonic() + BOUND
    while time.monotonic() < end and server_fds(p) != base:
        time.sleep(0.1)
    if server_fds(p) != base:
        fail(f"the server holds {server_fds(p)} fds, {base} before", p)
    stop(p)


def renegotiation(d):
    p, port = start(d)
    # TLS 1.2 (1.3 has no renegotiation), then R: the server refuses.
    r = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-tls1_2", "-CAfile",
                        os.path.join(d, "ca.pem"), "-servername", "localhost"], input="R\n",
                       capture_output=True, text=True, timeout=BOUND)
    out = r.stdout + r.stderr
    if "RENEGOTIATING" not in out:
        fail(f"s_client did not try to renegotiate: {out[-400:]}", p)
    if "no renegotiation" not in out and "alert" not in out:
        fail(f"the renegotiation was not refused: {out[-400:]}", p)
    if not served(d, port):
        fail("not serving after a renegotiation attempt", p)
    stop(p)


def bad_certificates(d):
    for cert, why in (("expired.pem", "expired"), ("wronghost.pem", "localhost")):
        p, port = start(d, cert=cert)
        r = curl(d, port)
        if r.returncode != 60 or why not in r.stderr:
            fail(f"curl accepted {cert}, or said no reason: {r.returncode} {r.stderr!r}", p)
        try:
            get_python(d, port)
            fail(f"python accepted {cert}", p)
        except ssl.SSLCertVerificationError as e:
            if why not in str(e) and "match" not in str(e):
                fail(f"python's reason for {cert}: {e}", p)
        r = curl(d, port, "--insecure")
        if r.returncode != 0 or r.stdout != "Hello, World!":
            fail(f"curl --insecure on {cert}: {r.returncode} {r.stderr!r}", p)
        data, _, _ = get_python(d, port, verify=False)
        if not data.endswith(b"Hello, World!"):
            fail(f"python without verification on {cert}", p)
        stop(p)


def bad_files(d):
    for cert, key, named in (("server.pem", "missing.key", "missing.key"),
                             ("server.pem", "other.key", "other.key"),
                             ("broken.pem", "server.key", "broken.pem")):
        r = subprocess.run([HTTPD, "--listen", "127.0.0.1:0", "--loops", "1", "--tls-cert", os.path.join(d, cert),
                            "--tls-key", os.path.join(d, key)], capture_output=True, text=True, timeout=BOUND)
        if r.returncode == 0 or named not in r.stderr:
            fail(f"httpd with {cert}/{key}: exit {r.returncode}, {r.stderr!r} does not name {named}")
    r = subprocess.run([HTTPD, "--listen", "127.0.0.1:0", "--tls-cert", os.path.join(d, "server.pem")],
                       capture_output=True, text=True, timeout=BOUND)
    if r.returncode != 2 or "--tls-key" not in r.stderr:
        fail(f"--tls-cert alone: {r.returncode} {r.stderr!r}")


def main():
    if not shutil.which("openssl") or not shutil.which("curl"):
        print("test_httpd_tls: needs openssl and curl (scripts/deps.sh test)")
        sys.exit(77)
    d = tempfile.mkdtemp()
    try:
        subprocess.run(["sh", MAKE_CERTS, d], check=True)
        bad_files(d)
        basics(d, 1)
        basics(d, 2)
        renegotiation(d)
        bad_certificates(d)
        silent_clients(d)
    finally:
        shutil.rmtree(d)
    print("test_httpd_tls: ok")


if __name__ == "__main__":
    main()
