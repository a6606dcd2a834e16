"""Assembling a workspace: what is read of it, and how."""

from __future__ import annotations

import shutil

from grader.exercises import find
from grader.submission import assemble


def test_a_protected_file_grown_to_a_sparse_giant_is_seen_changed_without_reading_it_whole(tmp_path):
    ex = find("memory-leak")
    ws = tmp_path / "ws"
    shutil.copytree(ex.dir, ws)
    with open(ws / "BRIEF.md", "ab") as f:
        f.truncate(2 << 30)  # 2 GiB, sparse: sizes differ, so nothing of it is read
    sub = assemble(ex, "workspace", ws, tmp_path / "sub")
    assert sub.protected_changed == ["BRIEF.md"]


def test_protected_files_as_shipped_are_not_changed(tmp_path):
    ex = find("memory-leak")
    ws = tmp_path / "ws"
    shutil.copytree(ex.dir, ws)
    assert assemble(ex, "workspace", ws, tmp_path / "sub").protected_changed == []
