"""`trainwreck session import` refuses every bad archive with one line, exit 2, and nothing
recorded: no attempt, the workspace as it was, no copy kept. The archive is untrusted input, so
each way it can be wrong is tried on its own (no grading runs here)."""

from __future__ import annotations

import gzip
import tarfile
from datetime import timedelta
from pathlib import Path

import pytest

from grader.bundle import archive, intake
from grader.sessions.attempts import unified_diff
from grader.sessions.errors import SessionError
from grader.sessions.models import parse_time
from tests.grader.bundle.remote import FIX, SLUG, Archive, Member, session, write

MiB = 1 << 20


def shifted(iso: str, **delta) -> str:
    return (parse_time(iso) + timedelta(**delta)).isoformat(timespec="seconds")


def _good(s) -> Archive:
    return Archive(session=s.id, submitted_at=shifted(s.started_at, seconds=30))


# each: how to spoil a valid archive, and the words of the one-line refusal
SPOILED = {
    "other session": (lambda a: setattr(a, "session", "0badc0de"), "was submitted to session '0badc0de'"),
    "other exercise": (lambda a: setattr(a, "exercise", "memory-leak"), "which session"),
    "changed after submit": (lambda a: setattr(a, "manifest", {**a.made_manifest(), "files": {
        "train.py": "0" * 64, "DIAGNOSIS.md": a.made_manifest()["files"]["DIAGNOSIS.md"]}}),
        "train.py's sha256 is not the one"),
    "not an editable file": (lambda a: a.files.update({"data.py": b"x = 1\n"}), "holds data.py, not an editable"),
    "a name with escapes": (lambda a: a.files.update({"evil\x1b[2J\n.py": b"1"}), "holds 'evil\\x1b[2J\\n.py', not"),
    "an unlisted name with escapes": (lambda a: a.extra.append(Member("files/\x1b]0;pwned\x07.py", b"1")),
                                      "'\\x1b]0;pwned\\x07.py' in it but not listed"),
    "editable file missing": (lambda a: a.files.pop("train.py"), "lacks train.py"),
    "traversal": (lambda a: a.extra.append(Member("files/../../../etc/cron.d/x", b"* * * * * root sh\n")),
                  "points outside the archive"),
    "absolute path": (lambda a: a.extra.append(Member("/tmp/x.py", b"1")), "points outside the archive"),
    "symlink": (lambda a: a.extra.append(Member("files/link.py", kind=tarfile.SYMTYPE, link="/etc/passwd")),
                "is a symbolic link to '/etc/passwd'"),
    "hard link": (lambda a: a.extra.append(Member("files/hard.py", kind=tarfile.LNKTYPE, link="files/train.py")),
                  "is a hard link"),
    "folder": (lambda a: a.extra.append(Member("files/sub", kind=tarfile.DIRTYPE)), "is not a regular file"),
    "fifo": (lambda a: a.extra.append(Member("files/pipe", kind=tarfile.FIFOTYPE)), "is not a regular file"),
    "device": (lambda a: a.extra.append(Member("files/sda", kind=tarfile.BLKTYPE)), "is not a regular file"),
    "twice": (lambda a: a.extra.append(Member("files/train.py", FIX)), "appears twice"),
    "outside files/": (lambda a: a.extra.append(Member("README.txt", b"hi")), "neither submission.json"),
    "unlisted file": (lambda a: a.extra.append(Member("files/extra.py", b"1")), "extra.py in it but not listed"),
    "too large a file": (lambda a: a.files.update({"train.py": b"#" * (archive.MAX_FILE_BYTES + 1)}),
                         "more than the 16777216"),
    "too large a diagnosis": (lambda a: a.files.update({"DIAGNOSIS.md": b"a" * (archive.MAX_DIAGNOSIS_BYTES + 1)}),
                              "more than the 1048576"),
    "too many members": (lambda a: a.extra.extend(Member(f"files/m{i}.py", b"1") for i in range(archive.MAX_MEMBERS)),
                         "more than 32 members"),
    "no manifest": (lambda a: setattr(a, "manifest", False), "no submission.json"),
    "manifest not JSON": (lambda a: setattr(a, "manifest", "{not json"), "submission.json is not JSON"),
    "manifest extra key": (lambda a: setattr(a, "manifest", {**a.made_manifest(), "run": "rm -rf /"}),
                           "not the keys"),
    "manifest format": (lambda a: setattr(a, "manifest", {**a.made_manifest(), "format": 2}),
                        "is format 2; this trainwreck reads format 1"),
    "time without offset": (lambda a: setattr(a, "submitted_at", a.submitted_at[:19]), "has no UTC offset"),
    "time not a time": (lambda a: setattr(a, "submitted_at", "yesterday"), "is not an ISO 8601 time"),
    "hash not hex": (lambda a: setattr(a, "manifest", {**a.made_manifest(), "files": {"train.py": "abc"}}),
                     "not a table of file name -> sha256"),
    "before the session": (lambda a: setattr(a, "submitted_at", shifted(a.submitted_at, hours=-1)),
                           "before session"),
    "in the future": (lambda a: setattr(a, "submitted_at", shifted(a.submitted_at, hours=2)), "later than now"),
}


def build_spoiled(a: Archive, path: Path) -> Path:
    return write(path, a.members())


def assert_nothing_recorded(store, s, ws: Path, before: bytes) -> None:
    assert store.attempts(s.id) == []
    assert (ws / "train.py").read_bytes() == before
    assert not (store.path.parent / "submissions").exists()


@pytest.mark.parametrize("case", sorted(SPOILED))
def test_a_spoiled_archive_is_refused_with_nothing_recorded(tmp_path, invoke, case):
    store, s, (sx,) = session(tmp_path)
    ws, before = Path(sx.workspace), (Path(sx.workspace) / "train.py").read_bytes()
    a = _good(s)
    spoil, says = SPOILED[case]
    spoil(a)
    path = build_spoiled(a, tmp_path / "sub.tar.gz")
    with pytest.raises(SessionError) as e:
        intake.check(store, s.id, path)
    assert says in str(e.value) and "\n" not in str(e.value) and "\x1b" not in str(e.value)
    p = invoke("session", "import", s.id, str(path), "--db", str(store.path))
    lines = p.err.strip().splitlines()
    assert p.code == 2 and len(lines) == 1 and lines[0].startswith("error:") and says in lines[0], p.err
    assert p.out == ""
    assert_nothing_recorded(store, s, ws, before)


def test_the_unspoiled_archive_passes_the_checks(tmp_path):
    store, s, _ = session(tmp_path)
    path = build_spoiled(_good(s), tmp_path / "sub.tar.gz")
    got = intake.check(store, s.id[:4], path)  # a prefix of the id names the session too
    assert (got.session.id, got.exercise.slug, got.editable) == (s.id, SLUG, ["train.py"])
    assert got.submission.files["train.py"] == FIX and got.at == shifted(s.started_at, seconds=30)


@pytest.mark.parametrize("payload, says", [
    (b"not an archive at all", "not a submission archive"),
    (gzip.compress(b"\0" * 2048, mtime=0)[:20], "not a submission archive"),  # cut short
    (gzip.compress(b"plain text, gzipped, not a tar", mtime=0), "not a submission archive"),
], ids=["plain bytes", "gzip cut short", "gzip of no tar"])
def test_bytes_that_are_not_an_archive(tmp_path, payload, says):
    store, s, (sx,) = session(tmp_path)
    (tmp_path / "sub.tar.gz").write_bytes(payload)
    with pytest.raises(SessionError, match=says):
        intake.check(store, s.id, tmp_path / "sub.tar.gz")
    assert_nothing_recorded(store, s, Path(sx.workspace), (Path(sx.workspace) / "train.py").read_bytes())


def test_size_caps_on_the_file_and_the_decompressed_stream(tmp_path, monkeypatch):
    store, s, _ = session(tmp_path)
    path = build_spoiled(_good(s), tmp_path / "sub.tar.gz")
    monkeypatch.setattr(archive, "MAX_ARCHIVE_BYTES", path.stat().st_size - 1)
    with pytest.raises(SessionError, match="more than the 0 MiB a submission may be"):  # the cap, in MiB
        intake.check(store, s.id, path)
    monkeypatch.undo()
    # a gzip bomb: members within their own limit, 40 MiB of zeros in all, a few kB on disk
    bomb = _good(s)
    bomb.files.update({f"z{i}.py": b"\0" * (10 * MiB) for i in range(4)})
    path = build_spoiled(bomb, tmp_path / "bomb.tar.gz")
    assert path.stat().st_size < MiB
    with pytest.raises(SessionError, match="decompresses to more than"):
        intake.check(store, s.id, path)


def test_a_missing_file_or_session(tmp_path):
    store, s, _ = session(tmp_path)
    with pytest.raises(SessionError, match="is not a file"):
        intake.check(store, s.id, tmp_path / "nope.tar.gz")
    path = build_spoiled(_good(s), tmp_path / "sub.tar.gz")
    with pytest.raises(SessionError, match="no session 'ffff'"):
        intake.check(store, "ffff", path)


def test_a_closed_session_takes_no_attempt(tmp_path):
    store, s, (sx,) = session(tmp_path)
    path = build_spoiled(_good(s), tmp_path / "sub.tar.gz")
    store.close_session(s.id)
    with pytest.raises(SessionError, match="was closed at .*import before `trainwreck session close`"):
        intake.check(store, s.id, path)


def test_a_scenario_is_not_submitted(tmp_path):
    store, s, _ = session(tmp_path, [SLUG, "gpu-allocation"])
    a = _good(s)
    a.exercise, a.files = "gpu-allocation", {"DIAGNOSIS.md": b"plan\n"}
    with pytest.raises(SessionError, match="scored by the interviewer alone"):
        intake.check(store, s.id, build_spoiled(a, tmp_path / "sub.tar.gz"))


def _recorded(store, s, at: str, text: str):
    a = store.begin_attempt(s.id, SLUG, "ab" * 32, {"train.py": text}, {"train.py": ""}, unified_diff, at=at)
    return store.finish_attempt(a.id, "done", result={"passed": False})


def test_the_same_archive_twice_and_out_of_order(tmp_path):
    store, s, _ = session(tmp_path)
    a = _good(s)
    _recorded(store, s, parse_time(a.submitted_at).isoformat(timespec="seconds"), FIX.decode())
    with pytest.raises(SessionError, match="already recorded as attempt 1"):
        intake.check(store, s.id, build_spoiled(a, tmp_path / "again.tar.gz"))
    a.submitted_at = shifted(a.submitted_at, seconds=-10)
    with pytest.raises(SessionError, match="before attempt 1 .*in the order they were made"):
        intake.check(store, s.id, build_spoiled(a, tmp_path / "older.tar.gz"))
    a.submitted_at = shifted(a.submitted_at, seconds=60)
    assert intake.check(store, s.id, build_spoiled(a, tmp_path / "newer.tar.gz")).at == a.submitted_at


def test_install_replaces_the_workspace_files_readable_by_the_sandbox(tmp_path):
    store, s, (sx,) = session(tmp_path)
    got = intake.check(store, s.id, build_spoiled(_good(s), tmp_path / "sub.tar.gz"))
    ws = intake.install(got)
    assert (ws / "train.py").read_bytes() == FIX and (ws / "DIAGNOSIS.md").read_text() == "# found it\n"
    assert (ws / "train.py").stat().st_mode & 0o777 == 0o644  # the sandbox's user reads it
    assert not [p for p in ws.iterdir() if p.name.endswith(".import")]
    kept = intake.keep_archive(store, got)
    assert kept.read_bytes() == (tmp_path / "sub.tar.gz").read_bytes() and kept.parent.name == s.id
    assert kept.name.startswith(f"{SLUG}-") and kept.name.endswith(".tar.gz")
