"""The parent's watcher of published files: what it records for each way a file can change."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from harness import rundir
from harness.filewatch import KEPT_DIR, LOG, FileWatch

KEY = "k" * 32


def write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_in_place(path: Path, data: bytes) -> None:
    with open(path, "r+b") as f:  # the same inode, other bytes
        f.truncate(0)
        f.write(data)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # a coarse clock still sees a change


def remove(path: Path, data: bytes) -> None:
    path.unlink()


def link_out(path: Path, data: bytes) -> None:
    path.unlink()
    path.symlink_to("/etc/hostname")


@pytest.mark.parametrize("change, kind, in_place, kept", [
    (write_atomic, "version", False, True),
    (write_in_place, "version", True, True),
    (remove, "absent", False, False),
    (link_out, "not_kept", None, False),  # in place or not: the inode number may be reused
])
def test_a_change_is_recorded(tmp_path, change, kind, in_place, kept):
    work, run = tmp_path / "work", tmp_path / "run"
    (work / "out").mkdir(parents=True)
    ckpt = work / "out" / "ckpt.pt"
    ckpt.write_bytes(b"first")
    w = FileWatch(run, KEY, work, ["out/ckpt.pt"])
    w.poll(now=10.0)
    w.poll(now=10.5)  # nothing changed: no record
    change(ckpt, b"second version")
    w.poll(now=11.0)
    w.close()
    recs = rundir.read_records(run / LOG, KEY).valid
    assert [r["kind"] for r in recs[:2]] == ["version", kind]
    first, second = recs[0], recs[1]
    assert first["sha256"] == hashlib.sha256(b"first").hexdigest() and first["since"] is None
    assert second["path"] == "out/ckpt.pt" and second["t"] == 11.0 and second["since"] == 10.5
    assert in_place is None or bool(second.get("in_place")) is in_place
    assert ("kept" in second) is kept
    if kept:
        assert (run / KEPT_DIR / second["kept"]).read_bytes() == b"second version"
        assert second["sha256"] == hashlib.sha256(b"second version").hexdigest()
    assert len(recs) == 2  # close() looked once more and saw nothing new


@pytest.mark.parametrize("paths, says", [
    (["/etc/passwd"], "is not a path inside the work dir"),
    (["../out/ckpt.pt"], "is not a path inside the work dir"),
    ([" "], "is not a path inside the work dir"),
])
def test_watched_paths_stay_in_the_work_dir(tmp_path, paths, says):
    from harness.errors import LaunchError
    from harness.launch import LaunchConfig

    script = tmp_path / "train.py"
    script.write_text("")
    with pytest.raises(LaunchError, match=says):
        LaunchConfig(script=script, watch=paths).validate()


def test_a_file_that_changes_while_it_is_copied_is_looked_at_again(tmp_path, monkeypatch):
    work, run = tmp_path / "work", tmp_path / "run"
    work.mkdir()
    ckpt = work / "ckpt.pt"
    ckpt.write_bytes(b"x" * 10)
    w = FileWatch(run, KEY, work, ["ckpt.pt"])
    real = FileWatch._copy
    calls = []

    def growing(src, dest, seen):
        calls.append(1)
        if len(calls) == 1:  # a writer appends while the parent reads
            with open(src, "ab") as f:
                f.write(b"y")
        return real(src, dest, seen)

    monkeypatch.setattr(FileWatch, "_copy", staticmethod(growing))
    w.poll(now=1.0)
    w.poll(now=2.0)
    w.close()
    recs = rundir.read_records(run / LOG, KEY).valid
    assert [r["kind"] for r in recs] == ["changing", "version"]
    assert (run / KEPT_DIR / recs[1]["kept"]).read_bytes() == b"x" * 10 + b"y"
