"""checkpoint-resume graded for real: fixes that switch checkpointing or resume off, and partial
fixes, must not pass, each failing the check whose evidence shows what it left broken.

A run that never checkpoints, or ignores its checkpoint on restart, retrains from the start and,
being deterministic, ends at the parameters of its own uninterrupted run: only the restart's
fingerprints (where it began: resume_exact) and the save trace tell it apart from a real resume.
"""

from __future__ import annotations

import pytest

from grader.exercises import find
from grader.grade import GradeOptions, grade

pytestmark = pytest.mark.slow

EX = find("checkpoint-resume")
FIXED = (EX.solution_dir / "train.py").read_text()


def variant(*edits: tuple[str, str]) -> str:
    script = FIXED
    for old, new in edits:
        assert script.count(old) == 1, f"the reference solution no longer contains {old!r}"
        script = script.replace(old, new)
    return script


SAVE_GUARD = "        if master_process:  # the replicas are identical: one writer per file\n"
CASES = {
    # name: (script, {check: substring of its message that must appear}, checks that must pass)
    "never checkpoints": (
        variant((SAVE_GUARD, "        if False:\n")),
        {"checkpoints_sound": "no checkpoint was complete on disk when the resume run restarted: the job "
                              "began again from the initial parameters",
         "resume_exact": "began from the initial parameters"},
        []),
    "ignores its checkpoint on restart (trains from scratch for the full step count)": (
        variant(("    path = latest_checkpoint()\n", "    path = None\n")),
        {"checkpoints_sound": "began from the initial parameters, although the checkpoint of step 24 "
                              "(out/ckpt_002.pt) was complete on disk",
         "resume_exact": "began from the initial parameters"},
        []),
    "atomic and one writer, but the checkpoint still holds only the model": (
        variant(('''            save_checkpoint(ckpt_path(epoch), {"model": raw_model.state_dict(),
                                               "optimizer": optimizer.state_dict(),
                                               "scheduler": scheduler.state_dict(),
                                               "epoch": epoch, "step": step})''',
                 '''            save_checkpoint(ckpt_path(epoch), {"model": raw_model.state_dict(),
                                               "epoch": epoch, "step": step})'''),
                ('''        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
''', "")),
        {"checkpoints_sound": "out/ckpt_002.pt, a file a restart loads, holds no optimizer state",
         "resume_exact": "its own uninterrupted run"},
        ["workload_intact"]),
    "atomic, one writer, optimizer state restored, but the LR schedule starts over": (
        variant(('        scheduler.load_state_dict(ckpt["scheduler"])\n', "")),
        {"resume_exact": "its own uninterrupted run"},
        ["checkpoints_sound", "workload_intact"]),
    "the whole state from one writer, written in place, and a resume that falls back to an older file": (
        variant(('    tmp = path + ".tmp"\n', "    tmp = path\n"), ("    os.replace(tmp, path)\n", ""),
                ("""    path = latest_checkpoint()
    if path is not None:
        ckpt = torch.load(path, map_location=device)
""", """    ckpt = None
    for path in sorted(glob.glob(os.path.join(OUT_DIR, "ckpt_*.pt")), reverse=True):
        try:
            ckpt = torch.load(path, map_location=device)
            break
        except Exception:
            continue
    if ckpt is not None:
""")),
        {"checkpoints_sound": "in the resume_save run rank 0 was killed half-way through a torch.save straight "
                              "into out/ckpt_005.pt (step 48), and the restarted job then loaded that file"},
        ["workload_intact"]),
    "the whole state from one writer, but written in place": (
        variant(('    tmp = path + ".tmp"\n', "    tmp = path\n"), ("    os.replace(tmp, path)\n", "")),
        {"checkpoints_sound": "the job killed during a checkpoint write did not complete after its restart"},
        ["workload_intact"]),
}


@pytest.mark.timeout(900)
@pytest.mark.parametrize("case", list(CASES))
def test_disabled_or_partial_fixes_do_not_pass(tmp_path, case):
    script, must_fail, must_pass = CASES[case]
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "train.py").write_text(script)
    res = grade(EX, GradeOptions(kind="workspace", workspace=ws, out_dir=tmp_path / "out"))
    checks = {c.name: c for c in res.checks}
    assert not res.passed and not res.environment_failure, [c.message for c in res.checks]
    for name, says in must_fail.items():
        assert not checks[name].passed and says in checks[name].message, (name, checks[name].message)
    for name in must_pass:
        assert checks[name].passed, (name, checks[name].message)
