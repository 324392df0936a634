#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""examples/kv against redis-server itself, byte for byte.

    tests/examples/test_kv.py KV_BINARY

Starts a redis-server (Debian's redis-server package) and kv on free
loopback ports, sends both the same randomized pipelined streams of GET, SET,
DEL, INCR, EXISTS, PING, ECHO (cut into random pieces, with wrong argument
counts and INCR on non-numbers mixed in), and requires the same bytes back.
Then kv's own cases: WAITKEY woken by another client, a client that hangs up
while it waits, WAITKEY's timeout, a request larger than --max-request (an
error, the connection closed, other clients unaffected), and protocol errors.
Exits 0 when everything matches; 77 (skipped) when redis-server is missing.
"""
import os
import random
import shutil
import socket
import subprocess
import sys
import time

KV = sys.argv[1]
# TDL_TEST_WRAP runs kv under a tool, e.g. "valgrind -q --error-exitcode=99".
WRAP = os.environ.get("TDL_TEST_WRAP", "").split()
# Seconds, for what must happen: a bound, not a delay.  Generous: kv may run
# under valgrind (20-50 times slower) on a loaded machine.
BOUND = 60.0


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_listening(port, proc):
    end = time.monotonic() + BOUND
    while time.monotonic() < end:
        if proc.poll() is not None:
            sys.exit(f"test_kv: server on {port} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=BOUND).close()
            return
        except OSError:
            time.sleep(0.02)
    sys.exit(f"test_kv: nothing listens on {port}")


def bulk(b):
    return b"$%d\r\n%s\r\n" % (len(b), b)


def command(*args):
    return b"*%d\r\n" % len(args) + b"".join(bulk(a) for a in args)


def random_command(rng, keys):
    k = rng.choice(keys)
    r = rng.random()
    val = bytes(rng.choice(b"abcxyz0123456789-") for _ in range(rng.randint(0, 40)))  # both sides of kv's 16-byte in-entry values
    if r < 0.22:
        return command(b"SET", k, val if rng.random() < 0.7 else str(rng.randint(-5, 99)).encode())
    if r < 0.42:
        return command(b"GET", k)
    if r < 0.55:
        return command(b"INCR", k)
    if r < 0.63:
        return command(b"DEL", *rng.sample(keys, rng.randint(1, 3)))
    if r < 0.71:
        return command(b"EXISTS", *[rng.choice(keys) for _ in range(rng.randint(1, 4))])
    if r < 0.78:
        return command(b"PING") if rng.random() < 0.5 else command(b"PING", val)
    if r < 0.85:
        return command(b"ECHO", val)
    if r < 0.90:
        return command(rng.choice([b"get", b"Set", b"incr"]))  # wrong number of arguments
    if r < 0.95:
        return command(b"SET", k, b"9223372036854775807")  # INCR then overflows
    return command(b"INCR", k) if rng.random() < 0.5 else command(b"EXISTS", k)


def replies(buf):
    """How many whole replies buf holds (the commands here answer with simple
    strings, errors, integers and bulk strings, one reply each)."""
    n = i = 0
    while True:
        end = buf.find(b"\r\n", i)
        if end < 0:
            return n
        if buf[i:i + 1] == b"$" and int(buf[i + 1:end]) >= 0:
            end = end + 2 + int(buf[i + 1:end])
            if len(buf) < end + 2:
                return n
        i = end + 2
        n += 1


def exchange(port, stream, rng, expect_len=None, expect_replies=None):
    """Send stream in random pieces; read until the other side's answer is
    complete: expect_len bytes, or (for the reference) expect_replies whole
    replies."""
    s = socket.create_connection(("127.0.0.1", port), timeout=BOUND)
    i = 0
    while i < len(stream):
        n = rng.randint(1, 3000)
        s.sendall(stream[i:i + n])
        i += n
    got = b""
    while (len(got) < expect_len) if expect_len is not None else (replies(got) < expect_replies):
        chunk = s.recv(1 << 16)
        if not chunk:
            break
        got += chunk
    s.close()
    return got


def flushall(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=BOUND)
    s.sendall(command(b"FLUSHALL"))
    s.recv(100)
    s.close()


def compare(redis_port, kv_port):
    keys = [b"k%d" % i for i in range(6)] + [b"", b"a b", b"\x00\xff"]
    for seed in range(14):
        rng = random.Random(seed)
        count = rng.randint(50, 800)
        stream = b"".join(random_command(rng, keys) for _ in range(count))
        want = exchange(redis_port, stream, random.Random(seed + 100), expect_replies=count)
        got = exchange(kv_port, stream, random.Random(seed + 200), expect_len=len(want))
        if got != want:
            at = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), min(len(got), len(want)))
            sys.exit(f"test_kv: stream {seed} differs at byte {at}:\n redis {want[at-40:at+60]!r}\n kv    {got[at-40:at+60]!r}")
        flushall(redis_port)
        # kv has no FLUSHALL: delete what the stream may have left.
        exchange(kv_port, command(b"DEL", *keys), random.Random(0), expect_len=len(b":0\r\n"))
    print("test_kv: 14 random pipelined streams answered byte for byte as redis-server answers them")


def recv_line(s):
    buf = b""
    while not buf.endswith(b"\r\n"):
        c = s.recv(1)
        if not c:
            return buf
        buf += c
    return buf


def waiting(kv_port):
    """KVSTATS's count of clients parked in WAITKEY, asked on a connection
    of its own."""
    s = socket.create_connection(("127.0.0.1", kv_port), timeout=BOUND)
    s.sendall(command(b"KVSTATS"))
    recv_line(s)
    line = recv_line(s)
    s.close()
    return int(line.split(b"waiting:")[1])


def wait_waiting(kv_port, n):
    """Wait (bounded) until kv has n clients parked in WAITKEY: a WAITKEY
    sent is not yet one kv has read."""
    end = time.monotonic() + BOUND
    while waiting(kv_port) != n:
        if time.monotonic() > end:
            sys.exit(f"test_kv: kv never had {n} clients waiting")
        time.sleep(0.01)


def kv_only(kv_port):
    c = lambda: socket.create_connection(("127.0.0.1", kv_port), timeout=BOUND)
    # WAITKEY woken by another client's SET.
    w = c()
    w.sendall(command(b"WAITKEY", b"wk"))
    wait_waiting(kv_port, 1)
    other = c()
    other.sendall(command(b"SET", b"wk", b"hello"))
    assert recv_line(other) == b"+OK\r\n"
    assert recv_line(w) == b"$5\r\n" and recv_line(w) == b"hello\r\n", "WAITKEY woke with the value"
    # The connection goes on: pipelined commands sent while it waited are answered after.
    w.sendall(command(b"WAITKEY", b"wk2") + command(b"PING"))
    wait_waiting(kv_port, 1)
    other.sendall(command(b"INCR", b"wk2"))
    assert recv_line(other) == b":1\r\n"
    assert recv_line(w) == b"$1\r\n" and recv_line(w) == b"1\r\n"
    assert recv_line(w) == b"+PONG\r\n"
    # A client that hangs up while it waits: kv sees it (the next client works).
    h = c()
    h.sendall(command(b"WAITKEY", b"gone"))
    wait_waiting(kv_port, 1)
    w.sendall(command(b"KVSTATS"))
    recv_line(w)
    assert b"waiting:1" in recv_line(w), "the hung-up client's WAITKEY waits"
    h.close()
    wait_waiting(kv_port, 0)
    w.sendall(command(b"KVSTATS"))
    recv_line(w)
    assert b"waiting:0" in recv_line(w), "kv saw the client hang up"
    # WAITKEY's timeout: nil.
    w.sendall(command(b"WAITKEY", b"never", b"50"))
    assert recv_line(w) == b"$-1\r\n"
    assert exchange(kv_port, command(b"WAITKEY", b"x", b"-1"), random.Random(1), expect_len=10).startswith(b"-ERR")
    # A request larger than --max-request (4096 here): an error and the end
    # of that connection; the others go on.
    big = c()
    big.sendall(command(b"SET", b"big", b"x" * 10000))
    reply = big.recv(200)
    assert reply.startswith(b"-ERR"), reply
    assert big.recv(10) == b"", "closed after the error"
    o2 = c()
    o2.sendall(command(b"PING"))
    assert recv_line(o2) == b"+PONG\r\n"
    # Protocol errors: answered, then closed, as Redis does.
    # Leading zeros and "-0" are refused as Redis's string2ll refuses them
    # (checked against redis-server 7.0: invalid multibulk / bulk length).
    for bad in (b"*1\r\n+PING\r\n", b"*x\r\n", b"*1\r\n$-5\r\n", b"*00\r\n", b"*-0\r\n",
                b"*1\r\n$01\r\nx\r\n", b"*" + b"0" * 126 + b"\r\n"):
        p = c()
        p.sendall(bad)
        assert p.recv(200).startswith(b"-ERR Protocol error"), bad
        assert p.recv(10) == b""
    # Inline commands, as telnet sends them.
    assert exchange(kv_port, b"PING\r\nECHO hi\r\n", random.Random(2), expect_len=len(b"+PONG\r\n$2\r\nhi\r\n")) == \
        b"+PONG\r\n$2\r\nhi\r\n"
    print("test_kv: WAITKEY (woken, pipelined after, hang-up, timeout), oversized and malformed requests")


def main():
    redis = shutil.which("redis-server")
    if not redis:
        print("test_kv: redis-server is not installed (Debian: redis-server); skipped")
        return 77
    rport, kport = free_port(), free_port()
    procs = []
    try:
        procs.append(subprocess.Popen([redis, "--port", str(rport), "--bind", "127.0.0.1", "--save", "",
                                       "--appendonly", "no"], stdout=subprocess.DEVNULL))
        procs.append(subprocess.Popen(WRAP + [KV, "--listen", f"127.0.0.1:{kport}", "--max-request", "4096"],
                                      stderr=subprocess.DEVNULL))
        wait_listening(rport, procs[0])
        wait_listening(kport, procs[1])
        compare(rport, kport)
        kv_only(kport)
        procs[1].terminate()
        if procs[1].wait(timeout=BOUND) != 0:
            sys.exit(f"test_kv: kv exited with {procs[1].returncode} on SIGTERM")
        return 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


if __name__ == "__main__":
    sys.exit(main())
