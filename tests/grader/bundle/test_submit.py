"""A session's bundle carries submit.py and session.json; submit.py, run from the bundle alone,
packs the editable files and DIAGNOSIS.md with their hashes, the session id and the time into an
archive the interviewer's import reads, written whole or not at all."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tarfile
from datetime import UTC, datetime
from pathlib import Path

import pytest

from grader.bundle import archive
from grader.bundle.build import build
from tests.conftest import REPO
from tests.grader.bundle.remote import FIX, SLUG, load_submit, session

SID = "abcd1234"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("b") / "bundle"
    build([SLUG, "gpu-allocation"], out, SID)
    return out


def submit(folder: Path, *args: str) -> subprocess.CompletedProcess:
    # a bare interpreter in the bundle: no kit on the path, no site-packages needed
    return subprocess.run([sys.executable, "-I", "submit.py", *args], cwd=folder, capture_output=True, text=True,
                          timeout=60)


def test_a_session_bundle_carries_submit_and_the_session(bundle, tmp_path):
    spec = json.loads((bundle / "session.json").read_text())
    shipped = hashlib.sha256((REPO / "exercises" / SLUG / "train.py").read_bytes()).hexdigest()
    assert spec == {"format": 1, "session": SID,
                    "exercises": {SLUG: {"editable": ["train.py"], "shipped": {"train.py": shipped}}}}
    assert (bundle / "submit.py").is_file() and "## Handing in" in (bundle / "README.md").read_text()
    plain = build([SLUG], tmp_path / "plain")
    assert "submit.py" not in plain.listing and "session.json" not in plain.listing
    assert "Handing in" not in (tmp_path / "plain" / "README.md").read_text()
    assert "{{" not in (tmp_path / "plain" / "README.md").read_text()


def test_submit_packs_what_the_import_reads(bundle, tmp_path):
    folder = tmp_path / "cand"
    subprocess.run(["cp", "-r", str(bundle), str(folder)], check=True)
    (folder / "exercises" / SLUG / "train.py").write_bytes(FIX)
    p = submit(folder, "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    path = Path(out["archive"])
    assert path.parent == folder / "submissions" and path.name.startswith(f"{SLUG}-") and p.stderr == ""
    got = archive.read(path)
    assert (got.session, got.exercise) == (SID, SLUG)
    assert got.files == {"train.py": FIX, "DIAGNOSIS.md": (folder / "exercises" / SLUG / "DIAGNOSIS.md").read_bytes()}
    assert got.sha256["train.py"] == hashlib.sha256(FIX).hexdigest()
    assert abs((datetime.now(UTC) - got.at).total_seconds()) < 60
    with tarfile.open(path) as tar:
        assert [m.name for m in tar.getmembers()] == ["submission.json", "files/train.py", "files/DIAGNOSIS.md"]
        assert all(m.isfile() and m.mode == 0o644 for m in tar.getmembers())
    assert not list(path.parent.glob("*.part"))


def test_submit_refuses_with_one_line(bundle, tmp_path):
    folder = tmp_path / "cand"
    subprocess.run(["cp", "-r", str(bundle), str(folder)], check=True)
    p = submit(folder, "memory-leak")
    assert p.returncode == 2 and p.stderr.strip() == ("error: no exercise 'memory-leak' to submit in this bundle "
                                                      f"(it has: {SLUG})")
    (folder / "taken.tar.gz").write_text("mine")
    p = submit(folder, "--out", "taken.tar.gz")
    assert p.returncode == 2 and "taken.tar.gz already exists" in p.stderr
    assert (folder / "taken.tar.gz").read_text() == "mine"
    (folder / "exercises" / SLUG / "train.py").unlink()
    p = submit(folder)
    assert p.returncode == 2 and "train.py is missing" in p.stderr and len(p.stderr.splitlines()) == 1
    (folder / "session.json").unlink()
    p = submit(folder)
    assert p.returncode == 2 and "not tied to an interview session" in p.stderr
    assert not (folder / "submissions").exists()


def test_unchanged_files_are_noted_and_names_never_collide(bundle, tmp_path):
    mod = load_submit()
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    first = mod.submit(None, None, root=bundle, at=at)
    second = mod.submit(None, tmp_path, root=bundle, at=at)
    third = mod.submit(None, tmp_path, root=bundle, at=at)
    assert first["unchanged"] == ["train.py"] and first["submitted_at"] == "2026-01-02T03:04:05+00:00"
    assert Path(first["archive"]).parent == bundle / "submissions"
    assert [Path(r["archive"]).name for r in (second, third)] == [
        f"{SLUG}-20260102T030405Z.tar.gz", f"{SLUG}-20260102T030405Z-2.tar.gz"]


def test_an_interrupted_submit_leaves_nothing_under_the_name(bundle, tmp_path, monkeypatch):
    mod = load_submit()

    def broken(self, *a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(tarfile.TarFile, "addfile", broken)
    with pytest.raises(OSError, match="disk full"):
        mod.submit(SLUG, tmp_path / "x.tar.gz", root=bundle)
    assert list(tmp_path.iterdir()) == []


def test_bundle_command_for_a_session(tmp_path, invoke):
    store, s, _ = session(tmp_path)
    db = str(store.path)
    p = invoke("bundle", "--session", s.id, "--out", str(tmp_path / "b"), "--db", db, "--json")
    assert p.code == 0, p.err
    assert json.loads(p.out)["session"] == s.id
    assert json.loads((tmp_path / "b" / "session.json").read_text())["session"] == s.id
    for args, says in [(["bundle", SLUG, "--session", s.id], "not both"),
                       (["bundle"], "name the exercise SLUGS to bundle, or --session ID")]:
        p = invoke(*args, "--out", str(tmp_path / "c"), "--db", db)
        assert p.code == 2 and says in p.err and len(p.err.strip().splitlines()) == 1, p.err
    store.close_session(s.id)
    p = invoke("bundle", "--session", s.id, "--out", str(tmp_path / "c"), "--db", db)
    assert p.code == 2 and "was closed" in p.err
    assert not (tmp_path / "c").exists()
