"""`trainwreck watch` on a real practice workspace (amp-no-scaler, the quickest grading): how long
from a save to the re-grade starting, with and without a grading in flight, and how long a
cancel takes until nothing of the grading runs. Times are taken by this script's clock when each
event line appears on watch's stdout (``--json`` flushes one line per event); the cancel's own
duration is the figure watch reports in its ``cancelled`` event.

    python benchmarks/practice_watch.py [--cancels 3] [--idle 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
TW = [sys.executable, "-m", "grader.cli"]


class Events:
    def __init__(self, path: Path):
        self.path, self.seen, self._offset = path, [], 0

    def poll(self) -> None:
        with open(self.path) as f:
            f.seek(self._offset)
            chunk = f.read()
        end = chunk.rfind("\n")
        if end >= 0:
            self._offset += end + 1
            now = time.perf_counter()
            self.seen += [(now, json.loads(line)) for line in chunk[:end].splitlines() if line.strip()]

    def wait(self, kind: str, n: int | None = None, timeout: float = 300.0) -> tuple[float, dict]:
        end = time.perf_counter() + timeout
        while time.perf_counter() < end:
            self.poll()
            for at, e in self.seen:
                if e["event"] == kind and (n is None or e.get("n") == n):
                    return at, e
            time.sleep(0.01)
        raise SystemExit(f"no {kind} event for grading {n} within {timeout:.0f} s")


def ranks_running(grades: Path) -> bool:
    """Rank 0 of the grading in flight has recorded a step (a cancelled grading's folder is removed,
    so during the cancel rounds the only one is the current grading's)."""
    return any(f.stat().st_size > 0 for f in grades.glob("*/*/runs/main/ranks/0/events.jsonl"))


def left_running(grades: Path) -> int:
    n = 0
    for p in psutil.process_iter():
        try:
            if p.environ().get("TRAINWRECK_RUN_DIR", "").startswith(str(grades)):
                n += 1
        except psutil.Error:
            continue
    return n


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cancels", type=int, default=3)
    ap.add_argument("--idle", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        env = {**os.environ, "TRAINWRECK_HOME": str(tmp / "home")}
        ws = tmp / "ws"
        subprocess.run([*TW, "start", "amp-no-scaler", "--dir", str(ws)], env=env, check=True, capture_output=True)
        grades = tmp / "home" / "practice" / "grades"
        log = tmp / "watch.jsonl"
        log.write_text("")
        script = ws / "train.py"
        shipped = script.read_text()
        with open(log, "w") as out:
            watch = subprocess.Popen([*TW, "watch", "--json"], cwd=ws, env=env, stdout=out,
                                     stderr=subprocess.DEVNULL)
        ev = Events(log)
        to_start, cancels, detect = [], [], []
        n = 1
        try:
            ev.wait("grading", 1)
            for i in range(args.cancels):  # a save while the grading's ranks are running
                while not ranks_running(grades):
                    time.sleep(0.05)
                saved = time.perf_counter()
                script.write_text(shipped + f"# save {i}\n")
                at_cancel, c = ev.wait("cancelled", n)
                at_start, _ = ev.wait("grading", n + 1)
                cancels.append(c["seconds"])
                detect.append(at_cancel - saved - c["seconds"])
                to_start.append(at_start - saved)
                n += 1
            idle = []
            for i in range(args.idle):  # a save with nothing in flight: a version that fails fast
                ev.wait("result", n)
                time.sleep(1.0)
                saved = time.perf_counter()
                script.write_text(shipped + f"\nnot python {i} (\n")
                at_start, _ = ev.wait("grading", n + 1)
                idle.append(at_start - saved)
                n += 1
            ev.wait("result", n)
        finally:
            watch.terminate()
            watch.wait(60)
        leftover = left_running(grades)

    def fmt(xs: list[float]) -> str:
        return f"median {statistics.median(xs):.2f} s (min {min(xs):.2f}, max {max(xs):.2f}, n={len(xs)})"

    load = os.getloadavg()[0]
    print(f"load average (1 min) at the end: {load:.1f}")
    print(f"save -> grading cancelled and re-grade started: {fmt(to_start)}")
    print(f"  of which the cancel (SIGTERM to nothing left running): {fmt(cancels)}")
    print(f"  of which the save seen (watchfiles batch + digest): {fmt(detect)}")
    print(f"save -> re-grade started, nothing in flight: {fmt(idle)}")
    print(f"processes of the gradings left running after watch ended: {leftover}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
