"""The parent watching the files a run publishes, from outside the ranks.

The save trace (``harness.saves``) follows the writes a rank makes through ``torch.save``,
``os.replace`` and friends, in the rank's process. A checkpoint written another way (bytes
serialised in memory and written with ``open().write``, a writer process the script spawned, which
never runs the bootstrap) leaves no trace records, or a rename of a file whose bytes the trace never
saw. The launcher's parent does not depend on how the file was written: every poll it looks at each
watched path (``stat``, never following a link), and when what is there changed (another inode, size
or modification time) it keeps a copy of the new version in ``<run_dir>/watched/`` and writes a
signed record of it to ``<run_dir>/watch.jsonl``::

    {"kind": "version", "path": "out/ckpt.pt", "t": 1700000012.41, "since": 1700000012.16,
     "in_place": false, "bytes": 16561731, "sha256": "...", "kept": "000003.bin"}

``t`` is the poll that saw it (the parent's clock; the version was published at most one poll
earlier), ``since`` the last poll that still saw the previous state. ``in_place``: the same inode
as before with other bytes: the file was rewritten where a reader opens it, and a reader between
``since`` and ``t`` could have met it half-written. ``kind`` is ``absent`` when the path went away,
``changing`` when it changed again while the copy was taken (the next poll tries again), and
``not_kept`` when it is not a regular file or past the caps (no copy, no digest).

Which step a kept version holds is the grader's to tell (``grader/evidence/watched.py``).
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import rundir

LOG = "watch.jsonl"
KEPT_DIR = "watched"
FILE_CAP = 512 * 2**20  # a version larger than this is recorded, not kept
TOTAL_CAP = 4 * 2**30  # every kept version of a run together
CHUNK = 1 << 20


@dataclass(frozen=True)
class _Seen:
    ino: int
    size: int
    mtime_ns: int


class FileWatch:
    """Polled by the launcher (``poll``) while the run goes on, and once more at its end (``close``)."""

    def __init__(self, run_dir: Path, key: str, work_dir: Path, paths: list[str]):
        self.run_dir, self.work_dir = Path(run_dir), Path(work_dir)
        self.paths = list(dict.fromkeys(p.rstrip("/") for p in paths))
        self._w = rundir.RecordWriter(self.run_dir / LOG, key)
        self._seen: dict[str, _Seen | None] = {p: None for p in self.paths}
        # per path, the last poll that saw the state ``_seen`` holds (the previous one, for a change)
        self._confirmed: dict[str, float | None] = {p: None for p in self.paths}
        self._kept = 0
        self._kept_bytes = 0

    def poll(self, now: float | None = None) -> None:
        for rel in self.paths:
            self._look(rel, now if now is not None else time.time())

    def close(self) -> None:
        self.poll()
        self._w.close()

    def _record(self, kind: str, rel: str, t: float, **fields: Any) -> None:
        self._w.write({"kind": kind, "path": rel, "t": round(t, 6), "since": self._confirmed[rel], **fields})

    def _look(self, rel: str, t: float) -> None:
        full = self.work_dir / rel
        prev = self._seen[rel]
        try:
            st = os.stat(full, follow_symlinks=False)
        except OSError:
            if prev is not None:
                self._record("absent", rel, t)
            self._seen[rel], self._confirmed[rel] = None, t
            return
        now = _Seen(st.st_ino, st.st_size, st.st_mtime_ns)
        if now == prev:
            self._confirmed[rel] = t
            return
        in_place = prev is not None and prev.ino == now.ino
        if not stat.S_ISREG(st.st_mode) or st.st_size > FILE_CAP or self._kept_bytes + st.st_size > TOTAL_CAP:
            self._record("not_kept", rel, t, in_place=in_place, bytes=st.st_size,
                         why="not a regular file" if not stat.S_ISREG(st.st_mode) else "past the size caps")
            self._seen[rel], self._confirmed[rel] = now, t
            return
        name = f"{self._kept + 1:06d}.bin"
        dest = self.run_dir / KEPT_DIR / name
        digest, size = self._copy(full, dest, now)
        if digest is None:  # it changed while we read it: a write is going on; look again next poll
            dest.unlink(missing_ok=True)
            self._record("changing", rel, t, in_place=in_place)
            return
        self._kept += 1
        self._kept_bytes += size
        self._record("version", rel, t, in_place=in_place, bytes=size, sha256=digest, kept=name)
        self._seen[rel], self._confirmed[rel] = now, t

    @staticmethod
    def _copy(src: Path, dest: Path, seen: _Seen) -> tuple[str | None, int]:
        """Copy ``src`` to ``dest``, hashing it; (None, 0) when it is not the file ``seen`` describes
        by the end of the copy."""
        dest.parent.mkdir(parents=True, exist_ok=True)
        h = hashlib.sha256()
        size = 0
        try:
            fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None, 0
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_ino != seen.ino:
                return None, 0
            with open(dest, "wb") as out:
                while size <= FILE_CAP and (chunk := os.read(fd, CHUNK)):
                    h.update(chunk)
                    out.write(chunk)
                    size += len(chunk)
            after = os.fstat(fd)
        finally:
            os.close(fd)
        try:
            still = os.stat(src, follow_symlinks=False)
        except OSError:  # renamed away or removed after we read it: what we read was whole
            still = None
        unchanged = (after.st_size == size == seen.size and after.st_mtime_ns == seen.mtime_ns
                     and (still is None or still.st_ino != seen.ino or still.st_mtime_ns == seen.mtime_ns))
        return (h.hexdigest(), size) if unchanged else (None, 0)
