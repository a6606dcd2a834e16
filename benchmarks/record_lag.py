"""How late records reach the parent: the parent's receive time (``rt``) minus the time a record
carries (``t``), per record stream, over every run dir under the folders given (gradings from
``trainwreck verify --out``, ``trainwreck grade``). The margin of ``harness.channel_server.LATE_S``.

    python benchmarks/record_lag.py /tmp/verify-out [...]
"""

from __future__ import annotations

import sys
from pathlib import Path

from harness import rundir


def lags(roots: list[Path]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for root in roots:
        for run_json in sorted(root.rglob("run.json")):
            run_dir = run_json.parent
            try:
                key = rundir.load_run(run_dir)["key"]
            except (OSError, ValueError, KeyError):
                continue
            for r in rundir.ranks_in(run_dir):
                for stream in (rundir.EVENTS, rundir.SAVES, rundir.COLLECTIVES):
                    for rec in rundir.read_records(rundir.rank_dir(run_dir, r) / stream, key).valid:
                        t, rt = rec.get("t"), rec.get("rt")
                        if isinstance(t, (int, float)) and isinstance(rt, (int, float)):
                            out.setdefault(stream, []).append(rt - t)
    return out


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    for stream, xs in sorted(lags([Path(a) for a in argv]).items()):
        xs.sort()
        n = len(xs)
        print(f"{stream:18s} {n:7d} records  p50 {xs[n // 2] * 1e3:7.1f} ms  p99 {xs[int(n * 0.99)] * 1e3:7.1f} ms  "
              f"max {xs[-1] * 1e3:7.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
