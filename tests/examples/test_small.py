#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Runs one of the small examples (examples/hello, echo, fetch, capture,
treewalk, chat) the way its comment says it is used, and checks what it
prints and exits with.

  test_small.py hello|echo|fetch|capture|treewalk|chat BINARY
"""
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

WAIT = 60  # seconds any run may take before the test calls it hung


def run(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=WAIT, **kw)


def expect(cond, what, p=None):
    if not cond:
        extra = f"\n--- rc {p.returncode}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}" if p else ""
        sys.exit(f"FAIL: {what}{extra}")


def hello(binary):
    p = run([binary, "4"])
    want = "".join(f"ping {i}\npong {i}\n" for i in range(1, 5))
    expect(p.returncode == 0 and p.stdout == want, "hello 4 plays four rounds in turn", p)
    p = run([binary])
    expect(p.returncode == 0 and p.stdout.count("ping") == 3, "hello plays three rounds by default", p)
    p = run([binary, "0"])
    expect(p.returncode == 2 and "usage" in p.stderr, "hello 0 is refused", p)


def echo(binary):
    srv = subprocess.Popen([binary, "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = srv.stdout.readline()
        expect(line.startswith("echo: listening on 127.0.0.1:"), f"echo prints its address, not {line!r}")
        port = int(line.rsplit(":", 1)[1])
        clients = [socket.create_connection(("127.0.0.1", port), timeout=WAIT) for _ in range(3)]
        for i, c in enumerate(clients):  # lines in pieces, pipelined, on three connections at once
            c.sendall(f"hello {i}\nsecond ".encode())
        for i, c in enumerate(clients):
            c.sendall(b"line\n")
        for i, c in enumerate(clients):
            want = f"hello {i}\nsecond line\n".encode()
            got = b""
            while len(got) < len(want):
                chunk = c.recv(4096)
                expect(chunk, f"client {i}: connection closed after {got!r}")
                got += chunk
            expect(got == want, f"client {i} got {got!r}, not {want!r}")
            c.shutdown(socket.SHUT_WR)
            expect(c.recv(4096) == b"", f"client {i}: echo closes after the client's EOF")
            c.close()
    finally:
        srv.kill()
        srv.wait()
    p = run([binary, "127.0.0.1:99999"])
    expect(p.returncode == 1 and "port above 65535" in p.stderr, "a bad address is explained", p)


def serve(listener, answer):
    """Accept on listener; answer each connection (or, with None, hold it open silently)."""
    held = []
    while True:
        try:
            c, _ = listener.accept()
        except OSError:
            return
        if answer is None:
            held.append(c)
            continue
        c.recv(4096)
        c.sendall(answer)
        c.close()


def fetch(binary):
    answer = b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello"
    servers = []
    for a in (answer, None):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        threading.Thread(target=serve, args=(s, a), daemon=True).start()
        servers.append(s)
    good = f"127.0.0.1:{servers[0].getsockname()[1]}"
    silent = f"localhost:{servers[1].getsockname()[1]}"
    p = run([binary, "--deadline", "20000", good, good, good])
    expect(p.returncode == 0 and p.stdout.count(f": {len(answer)} bytes: HTTP/1.0 200 OK") == 3,
           "three fetches from one server all succeed", p)
    # The silent server holds its fetch until the deadline; the others finish.
    p = run([binary, "--deadline", "2000", good, silent, good])
    lines = p.stdout.splitlines()
    expect(p.returncode == 1 and len(lines) == 3, "a silent server fails the run", p)
    expect(lines[0].startswith(good) and "200 OK" in lines[0] and "200 OK" in lines[2], "the others succeed", p)
    expect(lines[1].startswith(silent) and "timed out" in lines[1], "the silent one times out", p)
    p = run([binary, "--deadline", "soon", good])
    expect(p.returncode == 2 and '"soon"' in p.stderr, "a bad deadline is named", p)
    p = run([binary])
    expect(p.returncode == 2 and "usage" in p.stderr, "no server: usage", p)
    for s in servers:
        s.close()


def capture(binary):
    p = run([binary, "sh", "-c", "echo out; echo err >&2; exit 3"])
    expect(p.returncode == 3, "capture exits with the program's code", p)
    expect("stdout (4 bytes):\nout\n" in p.stdout and "stderr (4 bytes):\nerr\n" in p.stdout, "both captured", p)
    expect("exited with 3" in p.stdout, "the status is reported", p)
    p = run([binary, "printf", "%s", "no shell; $HOME `x`"])  # arguments reach the program as given
    expect(p.returncode == 0 and "no shell; $HOME `x`" in p.stdout, "no shell in between", p)
    p = run([binary, "sh", "-c", "kill -TERM $$"])
    expect(p.returncode == 128 + 15 and "killed by signal 15" in p.stdout, "a signal is reported", p)
    p = run([binary, "/nonexistent/program"])
    expect(p.returncode == 127 and "No such file" in p.stderr, "an exec error comes back as an error", p)
    p = run([binary])
    expect(p.returncode == 2 and "usage" in p.stderr, "no program: usage", p)


def fnv(h, data):
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def treewalk(binary):
    top = tempfile.mkdtemp(prefix="treewalk-")
    gcov = tempfile.mkdtemp(prefix="treewalk-gcov-")
    try:
        os.chmod(top, 0o755)
        files = {"a.txt": b"hello\n", "empty": b"", "sub/deeper/c.txt": b"c" * 10}
        rnd = random.Random(7)
        files["sub/b.bin"] = bytes(rnd.getrandbits(8) for _ in range(200000))  # several reads
        for i in range(150):  # several directory batches
            files[f"many/f{i:03d}"] = f"file {i}\n".encode()
        for rel, data in files.items():
            path = os.path.join(top, rel)
            os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
        os.makedirs(os.path.join(top, "sub/deeper/deepest"))
        os.symlink("sub", os.path.join(top, "dirlink"))  # counted, not followed
        os.symlink("a.txt", os.path.join(top, "filelink"))
        os.mkfifo(os.path.join(top, "fifo"))  # never opened (it would wait for a writer)
        locked = os.path.join(top, "sub/locked")
        with open(locked, "wb") as f:
            f.write(b"secret")
        os.chmod(locked, 0)
        for d, _, _ in os.walk(top):
            os.chmod(d, 0o755)

        def as_nobody():  # root reads a mode-0 file: give root up, as the file's reader would be
            if os.geteuid() == 0:
                os.setgid(65534)
                os.setuid(65534)

        # In a coverage build (TDL_COVERAGE) the program writes gcov's counters
        # at its exit, which nobody may not do next to root's: somewhere else
        # (those runs' counts are left out), so that it says nothing on stderr.
        os.chmod(gcov, 0o777)
        nobody_env = dict(os.environ, GCOV_PREFIX=gcov)

        checksum = sum(fnv(fnv(0xcbf29ce484222325, rel.encode() + b"\0"), data) for rel, data in files.items())
        want = (f"files {len(files)}\ndirs 5\nlinks 2\nother 1\nbytes {sum(map(len, files.values()))}\n"
                f"errors 1\nchecksum {checksum & 0xFFFFFFFFFFFFFFFF:016x}\n")
        for backend in ("epoll", "poll", "auto"):
            for workers in ("1", "16"):
                env = dict(nobody_env, TDL_BACKEND=backend)
                p = run([binary, "--workers", workers, top], env=env, preexec_fn=as_nobody)
                expect(p.returncode == 1 and p.stdout == want,
                       f"treewalk on {backend} with {workers} workers: every file once, the right sum", p)
                expect(p.stderr.count("treewalk: ") == 1 and "sub/locked: " in p.stderr,
                       "the unreadable file is reported, and the walk goes on", p)
        os.chmod(locked, 0o644)
        p = run([binary, top], env=nobody_env, preexec_fn=as_nobody)
        expect(p.returncode == 0 and "errors 0\n" in p.stdout and p.stderr == "", "no error: exit 0", p)
        p = run([binary, os.path.join(top, "missing")])
        expect(p.returncode == 1 and "missing: " in p.stderr and p.stdout == "", "a missing tree is an error", p)
        p = run([binary, "--workers", "0", top])
        expect(p.returncode == 2 and '"0"' in p.stderr, "a bad worker count is named", p)
        p = run([binary])
        expect(p.returncode == 2 and "usage" in p.stderr, "no directory: usage", p)
    finally:
        shutil.rmtree(top, ignore_errors=True)
        shutil.rmtree(gcov, ignore_errors=True)



def chat(binary):
    """Clients on both loops; every line reaches every other client; one that
    stops reading is dropped while the others go on; SIGTERM exits 0."""
    srv = subprocess.Popen([binary, "127.0.0.1:0", "2", "300"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    try:
        first = srv.stdout.readline()
        expect(first.startswith("chat: listening on 127.0.0.1:"), f"chat prints its address, not {first!r}")
        port = int(first.split(",")[0].rsplit(":", 1)[1])

        def connect(rcvbuf=None):
            c = socket.socket()
            if rcvbuf:
                c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            c.settimeout(WAIT)
            c.connect(("127.0.0.1", port))
            return c, c.makefile("rb")

        clients = [connect() for _ in range(4)]
        loops = set()
        for _, f in clients:
            hello = f.readline().decode()
            expect(hello.startswith("* you are client ") and " on loop " in hello, f"a greeting, not {hello!r}")
            loops.add(hello.split()[-1])
        expect(loops == {"0", "1"}, f"clients land on both loops, not only {loops}")
        # every line to every other client, none back to its writer
        for i, (c, _) in enumerate(clients):
            c.sendall(f"line from {i}\n".encode())
            for j, (_, f) in enumerate(clients):
                if j != i:
                    got = f.readline().decode()
                    expect(got == f"line from {i}\n", f"client {j} got {got!r} for client {i}'s line")
        # one more client that never reads: once the kernel's buffers are full
        # its writer's deadline passes and it is dropped (reset); meanwhile, and
        # after, the others get every one of client 0's lines in turn.  The idle
        # client is not read from: reading would make room and keep it alive.
        idle, idle_f = connect(rcvbuf=4096)
        expect(idle_f.readline().startswith(b"* you are client"), "the idle client is greeted")
        big = "x" * 1000
        talker = clients[0][0]
        dropped, k, until = False, 0, time.monotonic() + WAIT
        while not dropped and time.monotonic() < until:
            talker.sendall(f"{k} {big}\n".encode())
            for j in (1, 2, 3):
                got = clients[j][1].readline().decode()
                expect(got == f"{k} {big}\n", f"client {j} got {got[:40]!r} for line {k}")
            k += 1
            # the kernel's view of the idle socket (TCP_INFO's first byte):
            # no longer ESTABLISHED (1) once the server reset or closed it
            dropped = idle.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] != 1
        expect(dropped, f"the client that stopped reading is dropped ({k} lines later)")
        # the others still talk
        clients[2][0].sendall(b"still here\n")
        for j in (0, 1, 3):
            got = clients[j][1].readline()
            expect(got == b"still here\n", f"client {j} got {got!r} after the drop")
        srv.send_signal(signal.SIGTERM)
        rc = srv.wait(timeout=WAIT)
        expect(rc == 0, f"SIGTERM ends chat with exit 0, not {rc}: {srv.stderr.read()}")
        for j, (_, f) in enumerate(clients):
            expect(f.read() == b"", f"client {j} is closed at the end")
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait()
    p = run([binary, "127.0.0.1:0", "0"])
    expect(p.returncode == 2 and "usage" in p.stderr, "chat with 0 loops is refused", p)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("hello", "echo", "fetch", "capture", "treewalk", "chat"):
        sys.exit(__doc__)
    globals()[sys.argv[1]](os.path.abspath(sys.argv[2]))
    print(f"{sys.argv[1]}: ok")
