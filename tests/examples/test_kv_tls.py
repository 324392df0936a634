#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""examples/kv over TLS (--tls-cert, --tls-key) against the real client,
`redis-cli --tls`, and Python's ssl module, with certificates that
tests/tls/make-certs.sh makes at run time.

- SET, GET, INCR with redis-cli --tls --cacert, verifying the server;
- a pipeline: several commands on one connection, and `redis-cli --pipe`;
- a value larger than kv's writer takes (sent around it), and WAITKEY woken
  by another client, both over TLS;
- a plaintext redis-cli against the TLS port: never answered, closed by the
  server (redis-cli says the server closed the connection), and the server
  keeps serving and says nothing about it;
- a client that connects and says nothing, and one that sends half a hello:
  closed at the handshake deadline (--tls-handshake-timeout);
- a certificate from a CA the client does not trust (self-signed, or the
  system's store without --cacert) and an expired one: redis-cli refuses.
  redis-cli (hiredis) does not check the host name; Python's ssl does, and
  refuses a certificate for another host;
- a missing key, a key that does not match, a file that is not PEM: kv does
  not start, naming the file; --tls-cert without --tls-key: a usage error.

    test_kv_tls.py PATH/TO/kv MAKE_CERTS_SH
Exits 77 (skipped) where `openssl` or a redis-cli with --tls is missing.
"""
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time

KV, MAKE_CERTS = sys.argv[1], sys.argv[2]
# TDL_TEST_WRAP runs kv under a tool, e.g. "valgrind -q --error-exitcode=99".
WRAP = os.environ.get("TDL_TEST_WRAP", "").split()
BOUND = 60.0  # seconds: a bound on what must happen, not a delay


def fail(msg, p=None):
    if p and p.poll() is None:
        p.kill()
    sys.exit(f"test_kv_tls: {msg}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(d, cert="server.pem", key="server.key"):
    port = free_port()
    p = subprocess.Popen([*WRAP, KV, "--listen", f"127.0.0.1:{port}", "--tls-cert", os.path.join(d, cert),
                          "--tls-key", os.path.join(d, key), "--tls-handshake-timeout", "1"],
                         stderr=subprocess.PIPE, text=True)
    line = p.stderr.readline()
    if "serving TLS on" not in line:
        fail(f"unexpected start line {line!r}", p)
    return p, port


def stop(p):
    p.send_signal(signal.SIGTERM)
    rc = p.wait(timeout=BOUND)
    rest = p.stderr.read()
    if rc != 0:
        fail(f"exit {rc}: {rest}")
    return rest


def cli(d, port, *args, tls=True, cacert=True, stdin=None):
    cmd = ["redis-cli", "-h", "127.0.0.1", "-p", str(port)]
    if tls:
        cmd.append("--tls")
        if cacert:
            cmd += ["--cacert", os.path.join(d, "ca.pem")]
    r = subprocess.run(cmd + list(args), input=stdin, capture_output=True, text=True, timeout=BOUND)
    return r.returncode, r.stdout + r.stderr


def expect(d, port, args, want, p):
    rc, out = cli(d, port, *args)
    if rc != 0 or out.strip() != want:
        fail(f"redis-cli {' '.join(args)}: exit {rc}, {out!r}, not {want!r}", p)


def context(d, check_hostname=True):
    ctx = ssl.create_default_context(cafile=os.path.join(d, "ca.pem"))
    ctx.check_hostname = check_hostname
    return ctx


def connect(d, port, host="localhost"):
    raw = socket.create_connection(("127.0.0.1", port), timeout=BOUND)
    return context(d).wrap_socket(raw, server_hostname=host)


def command(*args):
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def recv_exactly(s, n):
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {n} bytes")
        data += chunk
    return data


def closed_by_server(s):
    s.settimeout(None)
    try:
        return s.recv(1, socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


def commands(d):
    p, port = start(d)
    expect(d, port, ["SET", "counter", "41"], "OK", p)
    expect(d, port, ["INCR", "counter"], "42", p)
    expect(d, port, ["GET", "counter"], "42", p)
    expect(d, port, ["GET", "nothing"], "", p)
    # Several commands on one connection (redis-cli reads them from stdin).
    rc, out = cli(d, port, stdin="SET a x\nINCR n\nINCR n\nGET a\nPING\n")
    if rc != 0 or out.split() != ["OK", "1", "2", "x", "PONG"]:
        fail(f"commands from stdin: exit {rc}, {out!r}", p)
    # A pipeline in the protocol itself, all sent before any answer is read.
    n = 1000
    stream = "".join(command(b"INCR", b"piped").decode() for _ in range(n)) + command(b"GET", b"piped").decode()
    rc, out = cli(d, port, "--pipe", stdin=stream)
    if rc != 0 or f"errors: 0, replies: {n + 1}" not in out:
        fail(f"--pipe: exit {rc}, {out!r}", p)
    expect(d, port, ["GET", "piped"], str(n), p)
    # A value past the writer (sent by itself), read back whole.
    big = os.urandom(3 << 20).hex().encode()[: 3 << 20]
    with connect(d, port) as s:
        s.sendall(command(b"SET", b"big", big) + command(b"GET", b"big"))
        if recv_exactly(s, 5) != b"+OK\r\n":
            fail("SET of a large value", p)
        head = b"$%d\r\n" % len(big)
        got = recv_exactly(s, len(head) + len(big) + 2)
        if got != head + big + b"\r\n":
            fail("GET of a large value: not the bytes set", p)
    # WAITKEY parked over TLS, woken by a write from another client.
    with connect(d, port) as s:
        s.sendall(command(b"WAITKEY", b"wk", b"10000"))
        end = time.monotonic() + BOUND
        while time.monotonic() < end and "waiting:1" not in cli(d, port, "KVSTATS")[1]:
            time.sleep(0.05)
        expect(d, port, ["SET", "wk", "woken"], "OK", p)
        if recv_exactly(s, len(b"$5\r\nwoken\r\n")) != b"$5\r\nwoken\r\n":
            fail("WAITKEY over TLS was not woken with the value", p)
    stop(p)


def misbehaving_clients(d):
    p, port = start(d)
    # Plaintext: never answered; the server closes, and serves on.
    for _ in range(3):
        rc, out = cli(d, port, "PING", tls=False)
        if rc == 0 or "PONG" in out or "closed" not in out:
            fail(f"plaintext redis-cli: exit {rc}, {out!r}", p)
    expect(d, port, ["PING"], "PONG", p)
    # Silent, and half a ClientHello: closed at the handshake deadline (1 s).
    silent = socket.create_connection(("127.0.0.1", port), timeout=BOUND)
    half = socket.create_connection(("127.0.0.1", port), timeout=BOUND)
    obj_in, obj_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context(d).wrap_bio(obj_in, obj_out, server_hostname="localhost")
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    hello = obj_out.read()
    half.sendall(hello[: len(hello) // 2])
    expect(d, port, ["PING"], "PONG", p)  # served meanwhile
    end = time.monotonic() + BOUND
    while time.monotonic() < end and not (closed_by_server(silent) and closed_by_server(half)):
        time.sleep(0.1)
    if not closed_by_server(silent) or not closed_by_server(half):
        fail("a client that never ends its handshake was not closed at the deadline", p)
    silent.close()
    half.close()
    expect(d, port, ["PING"], "PONG", p)
    rest = stop(p)
    if rest.strip():
        fail(f"the server said something about bad clients: {rest!r}")


def untrusted(d):
    for cert in ("selfsigned.pem", "expired.pem"):
        p, port = start(d, cert=cert)
        rc, out = cli(d, port, "PING")
        if rc == 0 or "PONG" in out or "certificate verify failed" not in out:
            fail(f"redis-cli accepted {cert}: exit {rc}, {out!r}", p)
        rc, out = cli(d, port, "--insecure", "PING")
        if rc != 0 or out.strip() != "PONG":
            fail(f"redis-cli --insecure on {cert}: exit {rc}, {out!r}", p)
        stop(p)
    p, port = start(d)
    # Without --cacert, the system's store does not know the test CA.
    rc, out = cli(d, port, "PING", cacert=False)
    if rc == 0 or "certificate verify failed" not in out:
        fail(f"redis-cli trusted the test CA without --cacert: exit {rc}, {out!r}", p)
    stop(p)
    # Another host's certificate: Python's ssl checks the name and refuses.
    p, port = start(d, cert="wronghost.pem")
    try:
        connect(d, port).close()
        fail("python accepted wronghost.pem for localhost", p)
    except ssl.SSLCertVerificationError as e:
        if "localhost" not in str(e) and "match" not in str(e):
            fail(f"python's reason for wronghost.pem: {e}", p)
    expect(d, port, ["PING"], "PONG", p)  # still serving
    stop(p)


def bad_files(d):
    for cert, key, named in (("server.pem", "missing.key", "missing.key"),
                             ("server.pem", "other.key", "other.key"),
                             ("broken.pem", "server.key", "broken.pem")):
        r = subprocess.run([*WRAP, KV, "--listen", f"127.0.0.1:{free_port()}", "--tls-cert", os.path.join(d, cert),
                            "--tls-key", os.path.join(d, key)], capture_output=True, text=True, timeout=BOUND)
        if r.returncode != 1 or named not in r.stderr:
            fail(f"kv with {cert}/{key}: exit {r.returncode}, {r.stderr!r} does not name {named}")
    r = subprocess.run([*WRAP, KV, "--tls-cert", os.path.join(d, "server.pem")], capture_output=True, text=True,
                       timeout=BOUND)
    if r.returncode != 2 or "--tls-key" not in r.stderr:
        fail(f"--tls-cert alone: exit {r.returncode}, {r.stderr!r}")
    r = subprocess.run([*WRAP, KV, "--tls-handshake-timeout", "0"], capture_output=True, text=True, timeout=BOUND)
    if r.returncode != 2 or "--tls-handshake-timeout" not in r.stderr:
        fail(f"--tls-handshake-timeout 0: exit {r.returncode}, {r.stderr!r}")


def main():
    if not shutil.which("openssl") or not shutil.which("redis-cli"):
        print("test_kv_tls: needs openssl and redis-cli (scripts/deps.sh test)")
        sys.exit(77)
    r = subprocess.run(["redis-cli", "--help"], capture_output=True, text=True)
    if "--tls" not in r.stdout + r.stderr:
        print("test_kv_tls: this redis-cli was built without TLS")
        sys.exit(77)
    d = tempfile.mkdtemp()
    try:
        subprocess.run(["sh", MAKE_CERTS, d], check=True)
        bad_files(d)
        commands(d)
        misbehaving_clients(d)
        untrusted(d)
    finally:
        shutil.rmtree(d)
    print("test_kv_tls: ok")


if __name__ == "__main__":
    main()
