"""New records of each rank as they arrive, for the live display and the watchdog.

Only records whose MAC verifies under the launch's key count: a script appending lines to its
rank's files (junk, or plausible JSON without the key) makes no progress. The records reach the
parent through files in the run dir today; ``RecordFeed`` is the whole of what the monitor needs,
so a parent-owned channel can replace ``RunDirFeed`` without touching the watchdog.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from harness import rundir

# The files whose records are progress; events also carry the state the monitor follows, so every
# one of them is read. Of the others the monitor needs only whether a verified record arrived:
# lines are checked newest first and the first that verifies ends the check (a sample ledger can
# grow by thousands of lines a second, and the parent shares the ranks' cores).
STREAMS = (rundir.EVENTS, rundir.COLLECTIVES, rundir.SAMPLES, rundir.LOADS, rundir.SAVES)
FULL = (rundir.EVENTS,)


class RecordFeed(Protocol):
    def poll(self) -> dict[int, dict[str, list[dict[str, Any]]]]:
        """``{rank: {stream: [record, ...]}}``: the verified records written since the last poll (for
        streams other than events, at least the newest of them)."""
        ...


class RunDirFeed:
    """Reads each rank's record files from where the last poll stopped, whole lines only."""

    def __init__(self, run_dir: Path, key: str, streams: tuple[str, ...] = STREAMS):
        self.run_dir = run_dir
        self.key = key
        self.streams = streams
        self._offsets: dict[Path, int] = {}
        self.rejected = 0  # lines that did not verify: seen, never counted as progress

    def poll(self) -> dict[int, dict[str, list[dict[str, Any]]]]:
        out: dict[int, dict[str, list[dict[str, Any]]]] = {}
        for r in rundir.ranks_in(self.run_dir):
            per = out.setdefault(r, {})
            for name in self.streams:
                path = rundir.rank_dir(self.run_dir, r) / name
                recs = self._read(path, everything=name in FULL)
                if recs:
                    per[name] = recs
        return out

    def _read(self, path: Path, everything: bool) -> list[dict[str, Any]]:
        offset = self._offsets.get(path, 0)
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        end = chunk.rfind(b"\n")
        if end < 0:
            return []
        self._offsets[path] = offset + end + 1
        lines = [line for line in chunk[:end].split(b"\n") if line.strip()]
        recs = []
        for line in lines if everything else reversed(lines):
            rec = rundir.verified(line, self.key)
            if rec is None:
                self.rejected += 1
                continue
            recs.append(rec)
            if not everything:
                break
        return recs
