#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""examples/fetch with https:// URLs against real servers: `openssl s_server
-www` and a Python ssl server, with certificates that tests/tls/make-certs.sh
makes at run time.

- verified against --cacert: fetched; against the system's store (which does
  not know the test CA): refused, saying why;
- expired, wrong-host and self-signed certificates: refused with the reason,
  fetched with --insecure;
- a server that closes without close_notify: reported as truncation, unlike
  a clean end;
- bad command lines: --cacert without an https:// URL.

    test_fetch_tls.py PATH/TO/fetch MAKE_CERTS_SH
Exits 77 (skipped) where the `openssl` command is missing.
"""
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time

FETCH, MAKE_CERTS = sys.argv[1], sys.argv[2]
BOUND = 60.0


def fail(msg):
    sys.exit(f"test_fetch_tls: {msg}")


def s_server(d, cert):
    p = subprocess.Popen(["openssl", "s_server", "-accept", "127.0.0.1:0", "-cert", os.path.join(d, cert), "-key",
                          os.path.join(d, "server.key"), "-www"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True)
    end = time.monotonic() + BOUND
    while time.monotonic() < end:
        line = p.stdout.readline()
        m = re.search(r"ACCEPT .*:(\d+)", line)
        if m:
            return p, int(m.group(1))
    p.kill()
    fail(f"s_server did not start with {cert}")


def fetch(*args):
    r = subprocess.run([FETCH, "--deadline", "10000", *args], capture_output=True, text=True, timeout=BOUND)
    return r.returncode, r.stdout + r.stderr


def python_server(d, clean):
    """One HTTPS answer from Python's ssl module; with clean, close_notify after it."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(os.path.join(d, "server.pem"), os.path.join(d, "server.key"))
    ls = socket.create_server(("127.0.0.1", 0))
    port = ls.getsockname()[1]

    def serve():
        conn, _ = ls.accept()
        with ctx.wrap_socket(conn, server_side=True) as s:
            data = b""
            while b"\r\n\r\n" not in data:
                data += s.recv(4096)
            s.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")
            if clean:
                s.unwrap()
            else:
                s.shutdown(socket.SHUT_RDWR)  # at the socket: no close_notify
        ls.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return port, t


def main():
    if not shutil.which("openssl"):
        print("test_fetch_tls: needs the openssl command (scripts/deps.sh test)")
        sys.exit(77)
    d = tempfile.mkdtemp()
    try:
        subprocess.run(["sh", MAKE_CERTS, d], check=True)
        ca = os.path.join(d, "ca.pem")
        p, port = s_server(d, "server.pem")
        try:
            rc, out = fetch("--cacert", ca, f"https://localhost:{port}", f"https://127.0.0.1:{port}")
            if rc != 0 or out.count("HTTP/1.0 200 ok") != 2:
                fail(f"verified fetches: {rc} {out!r}")
            rc, out = fetch(f"https://localhost:{port}")
            if rc != 1 or "certificate verify failed" not in out:
                fail(f"the system's store should not know the test CA: {rc} {out!r}")
            rc, out = fetch("--insecure", f"https://localhost:{port}")
            if rc != 0 or "200 ok" not in out:
                fail(f"--insecure: {rc} {out!r}")
        finally:
            p.kill()
            p.wait()
        for cert, why in (("expired.pem", "expired"), ("wronghost.pem", "mismatch"),
                          ("selfsigned.pem", "self-signed")):
            p, port = s_server(d, cert)
            try:
                rc, out = fetch("--cacert", ca, f"https://localhost:{port}")
                if rc != 1 or why not in out:
                    fail(f"{cert}: refused saying '{why}'? {rc} {out!r}")
                rc, out = fetch("--insecure", f"https://localhost:{port}")
                if rc != 0 or "200 ok" not in out:
                    fail(f"{cert} with --insecure: {rc} {out!r}")
            finally:
                p.kill()
                p.wait()
        # Python's ssl module as the server: a clean end, then one without close_notify.
        port, t = python_server(d, clean=True)
        rc, out = fetch("--cacert", ca, f"https://localhost:{port}")
        t.join(BOUND)
        if rc != 0 or "HTTP/1.0 200 OK" not in out:
            fail(f"python server, clean end: {rc} {out!r}")
        port, t = python_server(d, clean=False)
        rc, out = fetch("--cacert", ca, f"https://localhost:{port}")
        t.join(BOUND)
        if rc != 1 or "close_notify" not in out:
            fail(f"python server, no close_notify: should be a truncation: {rc} {out!r}")
        rc, out = fetch("--cacert", ca, "127.0.0.1:1")
        if rc != 2 or "https://" not in out:
            fail(f"--cacert without https://: {rc} {out!r}")
    finally:
        shutil.rmtree(d)
    print("test_fetch_tls: ok")


if __name__ == "__main__":
    main()
