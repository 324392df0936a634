#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""examples/httpd --metrics: GET /-/metrics answers every loop's metrics in
the Prometheus text format (text/plain; version=0.0.4), fetched twice under a
little load: the text parses (with prometheus_client where it is installed,
python3-prometheus-client, and with the checks below everywhere), names every
loop, and the counters grew.  Without --metrics the path is 404.

    test_httpd_metrics.py PATH/TO/httpd
"""
import re
import signal
import socket
import subprocess
import sys

HTTPD = sys.argv[1]
BOUND = 60.0  # seconds, for what must happen: a bound, not a delay

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    text_string_to_metric_families = None

SAMPLE = re.compile(r'^([a-z_][a-z0-9_]*)(\{([a-z_]+="[^"\\\n]*"(,[a-z_]+="[^"\\\n]*")*)\})? ([0-9]+)$')


def start(args):
    p = subprocess.Popen([HTTPD, "--listen", "127.0.0.1:0"] + args, stderr=subprocess.PIPE, text=True)
    line = p.stderr.readline()
    m = re.search(r"\(port (\d+)\)", line)
    if not m:
        p.kill()
        sys.exit(f"test_httpd_metrics: unexpected start line {line!r}")
    return p, int(m.group(1))


def request(sock, path):
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            sys.exit(f"test_httpd_metrics: closed after {data!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(re.search(rb"Content-Length: (\d+)", head).group(1))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            sys.exit("test_httpd_metrics: closed in a body")
        body += chunk
    return head.decode(), body.decode()


def parse(text):
    """{(name, labels): value}, checking the format on the way."""
    types, series, last = {}, {}, None
    for line in text.splitlines():
        if line.startswith("# HELP "):
            assert len(line.split(" ", 3)) == 4, line
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert kind in ("counter", "gauge"), line
            assert name.startswith("treadle_"), line
            assert name not in types, f"{name} declared twice"
            assert name.endswith("_total") == (kind == "counter"), line
            types[name] = kind
            last = name
            continue
        m = SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        name, labels = m.group(1), m.group(3) or ""
        assert name == last, f"{name} not declared by the TYPE line before it"
        assert (name, labels) not in series, f"{line!r} twice"
        series[(name, labels)] = int(m.group(5))
    if text_string_to_metric_families:
        families = list(text_string_to_metric_families(text))
        assert len(families) == len(types), (len(families), len(types))
    return series


def total(series, name):
    return sum(v for (n, _), v in series.items() if n == name)


def run(loops):
    p, port = start(["--loops", str(loops), "--metrics"])
    try:
        probe = socket.create_connection(("127.0.0.1", port), timeout=BOUND)
        head, body = request(probe, "/-/metrics")
        assert head.startswith("HTTP/1.1 200"), head
        assert "Content-Type: text/plain; version=0.0.4" in head, head
        first = parse(body)
        for i in range(loops):
            assert ("treadle_fibers", f'loop="{i}",state="parked"') in first, f"loop {i} missing"
        assert ("treadle_resident_memory_bytes", "") in first
        assert first[("treadle_resident_memory_bytes", "")] > 0
        # A little load: connections, each with a few requests.
        socks = [socket.create_connection(("127.0.0.1", port), timeout=BOUND) for _ in range(8)]
        for _ in range(5):
            for s in socks:
                assert request(s, "/")[0].startswith("HTTP/1.1 200")
        _, body = request(probe, "/-/metrics")
        second = parse(body)
        for name in ("treadle_port_posts_total", "treadle_fiber_switches_total", "treadle_fiber_parks_total",
                     "treadle_io_parks_total"):
            if total(first, "treadle_fiber_switches_total") == 0:
                break  # a library built with TDL_METRICS=OFF: its own counters read 0
            if name == "treadle_port_posts_total" and loops == 1:
                continue
            assert total(second, name) > total(first, name), f"{name} did not grow"
        for (name, labels), v in first.items():
            if name.endswith("_total"):
                assert second[(name, labels)] >= v, f"counter {name}{{{labels}}} went down"
        if loops > 1:
            assert total(second, "treadle_acceptor_accepted_total") >= total(first, "treadle_acceptor_accepted_total") + 8
        for s in socks + [probe]:
            s.close()
        p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=BOUND)
        assert rc == 0, f"exit {rc}: {p.stderr.read()}"
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    parser = "prometheus_client and ours" if text_string_to_metric_families else "ours (no prometheus_client)"
    print(f"test_httpd_metrics: {loops} loop(s): metrics parsed by {parser}, counters grew")


def without_flag():
    p, port = start(["--loops", "1"])
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=BOUND)
        head, _ = request(s, "/-/metrics")
        assert head.startswith("HTTP/1.1 404"), head
        s.close()
    finally:
        p.kill()
        p.wait()


def main():
    run(2)
    run(1)
    without_flag()
    return 0


if __name__ == "__main__":
    sys.exit(main())
