"""A remote interview on two machines' worth of folders, each with its own HOME and state: the
interviewer opens a session and bundles it, the candidate (with the bundle alone) fixes the script
and submits, the interviewer imports the archive. The attempt is recorded at the submission's
time and graded with the verdict a local grading of the same files gives."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from grader.sessions.store import Store
from tests.conftest import kit_copy
from tests.grader.bundle.remote import FIX, SLUG

pytestmark = pytest.mark.slow
TW = [sys.executable, "-c", "from grader.cli import main; main()"]


def machine(root: Path, kit: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINWRECK")}
    (root / "home").mkdir(parents=True)
    env["HOME"] = str(root / "home")
    if kit:
        env["TRAINWRECK_HOME"] = str(root / "state")
        env["TRAINWRECK_KIT"] = str(kit_copy(root / "kit"))  # its own: other tests' sessions arm the repo's
    return env


def run(cmd: list[str], cwd: Path, env: dict[str, str], ok: tuple[int, ...] = (0,)) -> str:
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=400)
    assert p.returncode in ok, (cmd, p.returncode, p.stderr[-3000:])
    return p.stdout


def verdicts(result: dict) -> dict[str, bool]:
    return {c["name"]: c["passed"] for c in result["checks"]}


def test_bundle_submit_import_grades_as_the_local_flow(tmp_path):
    iv, cand = tmp_path / "interviewer", tmp_path / "candidate"
    env_i, env_c = machine(iv, kit=True), machine(cand, kit=False)

    # the interviewer's machine: a session, and its bundle to send
    new = json.loads(run([*TW, "session", "new", "--candidate", "Ada", "--exercise", SLUG, "--dir", str(iv / "ws"),
                          "--json"], iv, env_i))
    sid = new["session"]
    run([*TW, "bundle", "--session", sid, "--out", str(iv / "outbox" / "bundle.tar.gz")], iv, env_i)

    # the candidate's machine: the bundle alone, a fix, a submission
    shutil.copy(iv / "outbox" / "bundle.tar.gz", cand / "bundle.tar.gz")
    with tarfile.open(cand / "bundle.tar.gz") as tar:
        tar.extractall(cand, filter="data")
    folder = cand / "bundle" / "exercises" / SLUG
    (folder / "train.py").write_bytes(FIX)
    (folder / "DIAGNOSIS.md").write_text("# Diagnosis\nfp16 gradients underflowed: no GradScaler.\n")
    sub = json.loads(run([sys.executable, "-I", "submit.py", SLUG, "--json"], cand / "bundle", env_c))
    assert sub["session"] == sid and sub["unchanged"] == []

    # back on the interviewer's machine: import it (graded in the sandbox); and the local flow with
    # the same files: a candidate at this machine, in a session workspace, running `trainwreck grade`
    shutil.copy(sub["archive"], iv / "inbox.tar.gz")
    imported = json.loads(run([*TW, "session", "import", sid, str(iv / "inbox.tar.gz"), "--json"], iv, env_i,
                              ok=(0, 1)))
    here = json.loads(run([*TW, "session", "new", "--candidate", "Bo", "--exercise", SLUG, "--dir",
                           str(iv / "local"), "--json"], iv, env_i))
    (iv / "local" / SLUG / "train.py").write_bytes((folder / "train.py").read_bytes())
    local = json.loads(run([*TW, "grade", "--json"], iv / "local" / SLUG, env_i, ok=(0, 1)))
    assert imported["passed"] is local["passed"] is True
    assert verdicts(imported) == verdicts(local) and len(verdicts(local)) >= 3
    assert imported["submission"]["sha256"] == local["submission"]["sha256"]
    assert imported["isolation"] == local["isolation"]
    for s in (sid, here["session"]):  # bundling, importing, grading and the reference read the answers quietly
        shown = json.loads(run([*TW, "session", "show", s, "--json"], iv, env_i))
        assert shown["reveals"] == [] or not shown["answer_reads_watched"], shown["reveals"]

    with Store.open(iv / "state" / "sessions.db") as store:
        (a,) = store.attempts(sid)
        assert (a.n, a.status, a.passed) == (1, "done", True)
        assert a.started_at == sub["submitted_at"] and a.files == {"train.py": FIX.decode()}
        assert a.result["checks"] == imported["checks"]
        assert "no GradScaler" in store.exercise(sid, SLUG).diagnosis
        (b,) = store.attempts(here["session"])
        assert (b.passed, b.submission_sha256, b.files) == (a.passed, a.submission_sha256, a.files)
    (kept,) = (iv / "state" / "submissions" / sid).iterdir()  # the candidate's bytes, as received
    assert kept.read_bytes() == Path(sub["archive"]).read_bytes()
    # the same archive again is refused, and nothing more is recorded
    p = subprocess.run([*TW, "session", "import", sid, str(iv / "inbox.tar.gz")], cwd=iv, env=env_i,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "already recorded as attempt 1" in p.stderr
    with Store.open(iv / "state" / "sessions.db") as store:
        assert len(store.attempts(sid)) == 1
