#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Draw the pipes charts from bench/tools/sweep.py's CSV, and predict the seed's scale.

    python3 bench/tools/charts.py [--csv docs/charts/pipes-sweep.csv] [--out DIR] [--fit-only]

Draws, for each delay D in the CSV, two log-log charts like the 2010 GHC I/O
manager ones: messages per second against pipes (pipes-throughput-d<D>.png) and
peak RSS against pipes (pipes-memory-d<D>.png), one line per implementation,
each point the median of the rounds.  Only the CSV is read, so the charts can
be redrawn without running the sweep again.

Then fits treadle's figures (see fit_report) and prints what they predict at
100,000 pipes with 100,000 timers in flight beside the 2010 figure.  Needs
matplotlib for the charts (Debian: python3-matplotlib); --fit-only does not.
"""

import argparse
import csv
import math
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_CSV = os.path.join(ROOT, "docs", "charts", "pipes-sweep.csv")

# The seed's figure: GHC's 2010 I/O manager, 1,000,000 messages through
# 100,000 pipes (with timeouts) in 6.69 s.
SEED_PIPES = 100_000
SEED_MESSAGES = 1_000_000
SEED_SECONDS = 6.69

# One colour and marker per implementation, the same on every chart; treadle's
# lines are drawn thicker.
STYLE = {
    "treadle-callback": ("#d62728", "o"),
    "treadle-fiber": ("#ff7f0e", "s"),
    "libev": ("#1f77b4", "^"),
    "libuv": ("#2ca02c", "v"),
    "libevent": ("#9467bd", "D"),
    "go-1": ("#17becf", "<"),
    "tokio-ct": ("#8c564b", ">"),
}
LABEL = {
    "treadle-callback": "treadle, callbacks",
    "treadle-fiber": "treadle, a fiber per pipe",
    "go-1": "Go (GOMAXPROCS=1)",
    "tokio-ct": "tokio (current_thread)",
}

# The fit of cost per message uses only runs that kept the CPU busy: at D=1000
# and few pipes the run waits on the timers, and its wall time says nothing
# about the loop's cost.
BUSY_FRACTION = 0.8


def load(path):
    """(metadata dict from the '# key: value' lines, list of the ok rows)."""
    meta, lines = {}, []
    with open(path, newline="") as f:
        for line in f:
            if line.startswith("#"):
                k, sep, v = line[1:].partition(":")
                if sep:
                    meta[k.strip()] = v.strip()
            elif line.strip():
                lines.append(line)
    rows = []
    for r in csv.DictReader(lines):
        if r.get("status") != "ok":
            continue
        try:
            rows.append({
                "impl": r["impl"], "delay_us": int(r["delay_us"]), "pipes": int(r["pipes"]),
                "messages": int(r["messages"]), "msgs_per_s": float(r["msgs_per_s"]),
                "cpu_us_per_msg": float(r["cpu_us_per_msg"]), "peak_rss_kb": float(r["peak_rss_kb"]),
                "wall_s": float(r["wall_s"]), "cpu_s": float(r["user_s"]) + float(r["sys_s"]),
            })
        except (KeyError, ValueError):
            continue
    return meta, rows


def medians(rows):
    """(impl, delay) -> sorted list of (pipes, {key: median over rounds})."""
    groups = {}
    for r in rows:
        groups.setdefault((r["impl"], r["delay_us"], r["pipes"]), []).append(r)
    out = {}
    for (impl, d, p), rs in groups.items():
        m = {k: statistics.median(x[k] for x in rs) for k in ("msgs_per_s", "cpu_us_per_msg", "peak_rss_kb")}
        m["busy"] = statistics.median(x["cpu_s"] / x["wall_s"] for x in rs if x["wall_s"] > 0)
        m["n"] = len(rs)
        out.setdefault((impl, d), []).append((p, m))
    for v in out.values():
        v.sort()
    return out


def impl_order(impls):
    known = [i for i in STYLE if i in impls]
    return known + sorted(i for i in impls if i not in STYLE)


def draw(meta, med, outdir):
    try:
        import matplotlib
    except ImportError:
        sys.exit("charts: matplotlib is missing (Debian: apt-get install python3-matplotlib)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    def count(v, _pos):
        return f"{v / 1e6:g}M" if v >= 1e6 else f"{v / 1e3:g}k" if v >= 1e3 else f"{v:g}"

    delays = sorted({d for _, d in med})
    impls = impl_order({i for i, _ in med})
    rounds = meta.get("rounds", "?")
    msgs = int(meta.get("messages", "0") or 0)
    foot = (f"{msgs:,} one-byte messages per run; median of {rounds} interleaved round(s). "
            f"treadle {meta.get('commit', '?')}, {meta.get('date', '?')}\n{meta.get('machine', '')}")
    written = []
    for d in delays:
        what = "no delay" if d == 0 else f"each read {d} µs after its byte arrives (up to P timeouts in flight)"
        for kind, key, ylabel, scale in (("throughput", "msgs_per_s", "messages per second", 1.0),
                                         ("memory", "peak_rss_kb", "peak RSS (MiB)", 1 / 1024)):
            fig, ax = plt.subplots(figsize=(8, 5.5), dpi=110)
            for impl in impls:
                pts = med.get((impl, d))
                if not pts:
                    continue
                colour, marker = STYLE.get(impl, (None, "x"))
                ax.plot([p for p, _ in pts], [m[key] * scale for _, m in pts], marker=marker, markersize=4,
                        color=colour, linewidth=2.2 if impl.startswith("treadle") else 1.2,
                        label=LABEL.get(impl, impl))
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("pipes (P)")
            ax.set_ylabel(ylabel)
            # Ticks at 1, 2 and 5 times each power of ten, labelled: a chart
            # may span less than a decade, where plain log ticks label nothing.
            for axis in (ax.xaxis, ax.yaxis):
                axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
                axis.set_major_formatter(FuncFormatter(count))
                axis.set_minor_formatter(NullFormatter())
            ax.grid(True, which="major", alpha=0.35)
            ax.grid(True, which="minor", alpha=0.12)
            ax.set_title(f"pipes, D={d}: {kind}\n({what})", fontsize=11)
            ax.legend(fontsize=8, loc="best")
            fig.text(0.01, 0.005, foot, fontsize=6.5, color="#555555", va="bottom")
            fig.tight_layout(rect=(0, 0.05, 1, 1))
            path = os.path.join(outdir, f"pipes-{kind}-d{d}.png")
            fig.savefig(path)
            plt.close(fig)
            written.append(path)
    return written


def linfit(xs, ys):
    """Least squares y = a + b x: (a, b, r2)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return my, 0.0, 0.0
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    a = my - b * mx
    sst = sum((y - my) ** 2 for y in ys)
    sse = sum((y - a - b * x) ** 2 for x, y in zip(xs, ys))
    return a, b, (1 - sse / sst) if sst > 0 else 1.0


def fit_report(med, min_pipes):
    """The seed's scale from the sweep, for docs/PERFORMANCE.md:

    - cost per message: wall µs per message (1e6 / msgs_per_s) against P, as
      a + b ln P, over the runs with P >= min_pipes that kept the CPU busy
      (CPU / wall >= BUSY_FRACTION), for each style and delay;
    - memory: peak RSS against P, a straight line over P >= min_pipes: its
      slope at D=0 is the bytes per pipe, the D=1000 slope minus that the bytes
      per timer (at D=1000 every pipe has its timer in flight while it waits);
    - both evaluated at 100,000 pipes with 100,000 timers in flight (the D=1000
      fits), beside the 2010 figure.  Kernel memory (pipe buffers, epoll
      entries) is not in RSS, in 2010's charts or here.
    """
    out = []
    seed_us = SEED_SECONDS * 1e6 / SEED_MESSAGES
    out.append(f"The seed's scale: {SEED_MESSAGES:,} messages through {SEED_PIPES:,} pipes, "
               f"{SEED_PIPES:,} timers in flight (D=1000)")
    out.append(f"  2010, GHC's I/O manager: {SEED_SECONDS} s ({seed_us:.2f} µs per message; other hardware)")
    for impl in ("treadle-callback", "treadle-fiber"):
        fits = {}
        for d in sorted({d for i, d in med if i == impl}):
            pts = [(p, m) for p, m in med[(impl, d)] if p >= min_pipes]
            busy = [(p, m) for p, m in pts if m["busy"] >= BUSY_FRACTION]
            cost = None
            if len(busy) >= 2:
                cost = linfit([math.log(p) for p, _ in busy], [1e6 / m["msgs_per_s"] for _, m in busy])
            mem = linfit([p for p, _ in pts], [m["peak_rss_kb"] * 1024 for _, m in pts]) if len(pts) >= 2 else None
            fits[d] = (cost, mem, len(busy), len(pts), pts[-1][0] if pts else None)
            if cost:
                a, b, r2 = cost
                top, topm = busy[-1]
                out.append(f"  {impl} D={d}: µs/msg = {a:.3f} + {b:.4f} ln P (R² {r2:.2f}, {len(busy)} points, "
                           f"P {busy[0][0]}..{top}; measured at P={top}: {1e6 / topm['msgs_per_s']:.3f}); "
                           f"at P=100,000: {a + b * math.log(SEED_PIPES):.3f}")
            else:
                out.append(f"  {impl} D={d}: too few CPU-bound points with P >= {min_pipes} to fit the cost")
            if mem:
                a, b, r2 = mem
                out.append(f"  {impl} D={d}: peak RSS = {a / 1048576:.2f} MiB + {b:.0f} B x P (R² {r2:.2f})")
        hi = max(fits) if fits else None
        if 0 in fits and hi and hi > 0 and fits[0][1] and fits[hi][1]:
            per_pipe = fits[0][1][1]
            per_timer = fits[hi][1][1] - per_pipe
            tiny = per_timer < 0.02 * per_pipe  # within the fits' noise
            out.append(f"  {impl}: {per_pipe:.0f} bytes per pipe (D=0 slope), {per_timer:.0f} bytes per timer "
                       f"(D={hi} slope minus D=0's{': none measurable' if tiny else ''})")
        if hi and hi > 0 and fits[hi][0]:
            a, b, _ = fits[hi][0]
            us = a + b * math.log(SEED_PIPES)
            secs = us * SEED_MESSAGES / 1e6
            line = (f"  {impl} predicted at D={hi}: {secs:.2f} s ({us:.2f} µs per message, "
                    f"{SEED_SECONDS / secs:.1f}x the 2010 figure's speed)")
            if fits[hi][1]:
                ma, mb, _ = fits[hi][1]
                line += f", peak RSS {(ma + mb * SEED_PIPES) / 1048576:.0f} MiB"
            if fits[hi][4] is not None:
                line += f"; extrapolated from P <= {fits[hi][4]:,} (the fd limit here)"
            out.append(line)
    return "\n".join(out)


def reexec_for_matplotlib():
    """A python3 first on PATH (pyenv, a venv) may lack Debian's matplotlib
    that the system's /usr/bin/python3 has: run this script with that one."""
    try:
        import matplotlib  # noqa: F401
        return
    except ImportError:
        pass
    system = "/usr/bin/python3"
    if os.path.exists(system) and os.path.realpath(sys.executable) != os.path.realpath(system):
        os.execv(system, [system, os.path.abspath(__file__)] + sys.argv[1:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--csv", default=DEFAULT_CSV, help="the sweep's CSV (default: docs/charts/pipes-sweep.csv)")
    ap.add_argument("--out", help="directory for the PNGs (default: the CSV's directory)")
    ap.add_argument("--fit-only", action="store_true", help="print the fit, draw nothing")
    ap.add_argument("--fit-min-pipes", type=int, default=1000,
                    help="fit only pipe counts from this one up (default: 1000)")
    opts = ap.parse_args()
    try:
        meta, rows = load(opts.csv)
    except OSError as ex:
        print(f"charts: cannot read {opts.csv}: {ex.strerror} (run bench/tools/sweep.py first)", file=sys.stderr)
        return 1
    if not rows:
        print(f"charts: {opts.csv} has no successful runs", file=sys.stderr)
        return 1
    med = medians(rows)
    if not opts.fit_only:
        reexec_for_matplotlib()
        outdir = opts.out or os.path.dirname(os.path.abspath(opts.csv))
        os.makedirs(outdir, exist_ok=True)
        for path in draw(meta, med, outdir):
            print(f"charts: wrote {path}", file=sys.stderr)
    print(fit_report(med, opts.fit_min_pipes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
