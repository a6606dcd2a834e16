"""What the bootstrap's second exec (harness.bootstrap._settle_environment) adds to a rank's
start: one interpreter start-up and the bootstrap's own imports, before torch. Measured as the
difference between starting an interpreter that imports the bootstrap, and one that does so, then
execs itself and does it again; the two alternate, so load moves both alike.

    python benchmarks/bootstrap_exec.py --runs 20
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

ONCE = "import harness.bootstrap"
TWICE = ("import os, sys, harness.bootstrap; "
         "os.execv(sys.executable, [sys.executable, '-c', 'import harness.bootstrap'])")


def timed(code: str) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    n = ap.parse_args().runs
    once, twice = [], []
    for _ in range(n):
        once.append(timed(ONCE))
        twice.append(timed(TWICE))
    a, b = statistics.median(once), statistics.median(twice)
    print(f"runs {n}: one start {a * 1e3:.1f} ms, with the exec {b * 1e3:.1f} ms (median); "
          f"the exec adds {(b - a) * 1e3:.1f} ms per rank start")


if __name__ == "__main__":
    main()
