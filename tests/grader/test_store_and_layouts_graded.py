"""Real gradings (slow): periodic-stall with the artifact store running as a service outside the
ranks, and checkpoint-resume fixes whose checkpoints span several files.

- periodic-stall: the reference passes; a fix that gives the store a virtual clock (its modelled
  wait skipped, the upload still synchronous in the step loop) still stalls, because the wait is
  the service's now, and step_time_tail says the store was receiving an upload during the slow
  steps; a fix that replaces the store with copies into its folder fails checkpoint_fresh by name.
- checkpoint-resume: a fix that writes each checkpoint as a folder of files published by one
  rename, and one that uses torch.distributed.checkpoint as the PyTorch recipe does, both pass.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.exercises import find
from grader.grade import GradeOptions, grade

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

DATA = Path(__file__).parent / "data"


def _grade(slug: str, tmp_path: Path, script: Path | None):
    ex = find(slug)
    if script is None:
        return grade(ex, GradeOptions(kind="solution", out_dir=tmp_path / "out"))
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "train.py").write_text(script.read_text())
    return grade(ex, GradeOptions(kind="workspace", workspace=ws, out_dir=tmp_path / "out"))


@pytest.mark.parametrize("variant, fails, says", [
    (None, None, None),
    ("virtual_clock.py", "step_time_tail", "the artifact store was receiving an upload during"),
    ("copied_into_store.py", "checkpoint_fresh",
     "artifacts/: ckpt-000050.pt was written there by rank 0 (a rename at step 50)"),
])
def test_periodic_stall_with_the_store_as_a_service(tmp_path, variant, fails, says):
    res = _grade("periodic-stall", tmp_path, DATA / "periodic_stall" / variant if variant else None)
    checks = {c.name: c for c in res.checks}
    assert not res.environment_failure, [c.message for c in res.checks]
    if fails is None:
        assert res.passed, [(c.name, c.message) for c in res.checks if not c.passed]
        assert "artifacts/ held a complete checkpoint" in checks["checkpoint_fresh"].message
        return
    assert not res.passed and not checks[fails].passed and says in checks[fails].message, checks[fails].message


@pytest.mark.parametrize("fix, layout", [("folder_layout.py", "folders of files"),
                                         ("dcp.py", "torch.distributed.checkpoint folders")])
def test_checkpoint_resume_fixes_whose_checkpoints_span_several_files_pass(tmp_path, fix, layout):
    res = _grade("checkpoint-resume", tmp_path, DATA / "checkpoint_resume" / fix)
    checks = {c.name: c for c in res.checks}
    assert res.passed, [(c.name, c.message) for c in res.checks if not c.passed]
    assert layout in checks["checkpoints_sound"].message, checks["checkpoints_sound"].message
