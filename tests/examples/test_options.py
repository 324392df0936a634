#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The command lines of examples/httpd and examples/kv: --help goes to stdout
with exit 0 and lists every option; an unknown option, a missing value and a
bad value each exit 2 with a message that names the option and the value.

  test_options.py HTTPD KV
"""
import subprocess
import sys

failures = []


def check(argv, rc, stream, *words):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    out = p.stdout if stream == "stdout" else p.stderr
    missing = [w for w in words if w not in out]
    if p.returncode != rc or missing:
        failures.append(f"{' '.join(argv)}: rc {p.returncode} (want {rc}), {stream} lacks {missing}:\n"
                        f"  stdout: {p.stdout!r}\n  stderr: {p.stderr!r}")
    return p


def main():
    httpd, kv = sys.argv[1], sys.argv[2]
    options = ["--listen", "--loops", "--accept", "--pin", "--root", "--idle-timeout", "--read-timeout",
               "--write-timeout", "--grace", "--max-body", "--max-head", "--help"]
    p = check([httpd, "--help"], 0, "stdout", *options)
    if p.stderr:
        failures.append(f"httpd --help writes to stderr: {p.stderr!r}")
    check([httpd, "--frob"], 2, "stderr", '"--frob"')
    check([httpd, "--listen"], 2, "stderr", "--listen needs a value")
    check([httpd], 2, "stderr", "--listen")
    check([httpd, "--listen", "localhost:8080x"], 2, "stderr", "--listen", '"localhost:8080x"', "after the port")
    check([httpd, "--listen", ":99999"], 2, "stderr", "--listen", '":99999"', "port above 65535")
    check([httpd, "--listen", "1.2.3:80"], 2, "stderr", "--listen", '"1.2.3:80"')
    for opt, value in [("--loops", "0"), ("--loops", "many"), ("--loops", "99999"), ("--accept", "fast"),
                       ("--idle-timeout", "-1"), ("--read-timeout", "1s"), ("--write-timeout", ""),
                       ("--grace", "x"), ("--max-body", "-5"), ("--max-head", "1k"), ("--max-head", "0")]:
        check([httpd, "--listen", "127.0.0.1:0", opt, value], 2, "stderr", opt, f'"{value}"')

    p = check([kv, "--help"], 0, "stdout", "--listen", "--max-request", "--idle-timeout")
    check([kv, "--frob"], 2, "stderr", '"--frob"')
    check([kv, "--listen"], 2, "stderr", "--listen needs a value")
    check([kv, "--listen", "localhost:6380x"], 2, "stderr", "--listen", '"localhost:6380x"', "after the port")
    check([kv, "--listen", ":99999"], 2, "stderr", "--listen", "port above 65535")
    check([kv, "--max-request", "big"], 2, "stderr", "--max-request", '"big"')
    check([kv, "--idle-timeout", "-3"], 2, "stderr", "--idle-timeout", '"-3"')
    if failures:
        sys.exit("FAIL:\n" + "\n".join(failures))
    print("options: ok")


if __name__ == "__main__":
    main()
