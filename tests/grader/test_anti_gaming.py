"""Submissions that try to pass without fixing anything, graded for real on memory-leak (as
SWE-bench's spoofed-output tests do): none may pass, and each fails for the reason it deserves."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.exercises import find
from grader.grade import GradeOptions, grade, regrade
from grader.result import GradeResult
from harness.executor import executor_for

pytestmark = pytest.mark.slow

EX = find("memory-leak")
BROKEN = (EX.dir / "train.py").read_text()
FIXED = (EX.solution_dir / "train.py").read_text()

FORGE = '''
import json, os, time
_run = os.environ.get("TRAINWRECK_RUN_DIR")
if _run:
    _r = os.environ.get("RANK", "0")
    with open(os.path.join(_run, "ranks", _r, "events.jsonl"), "a") as f:
        for s in range(500):
            f.write(json.dumps({"kind": "step", "attempt": 0, "step": 1000 + s, "t": time.time(),
                                "rss_mb": 100.0, "mac": "0" * 32}) + "\\n")
    with open(os.path.join(_run, "ranks", _r, "samples.jsonl"), "a") as f:
        f.write(json.dumps({"a": 0, "ds": "train", "i": 0, "s": 0, "mac": "0" * 32}) + "\\n")
print("ALL CHECKS PASSED")
'''

OVERWRITE_PARAMS = '''
import atexit, os, torch
def _swap():
    run = os.environ.get("TRAINWRECK_RUN_DIR")
    if run:
        p = os.path.join(run, "ranks", os.environ.get("RANK", "0"), "final_params.safetensors")
        if os.path.exists(p):
            from safetensors.torch import load_file, save_file
            save_file({k: v * 0 for k, v in load_file(p).items()}, p)
atexit.register(_swap)
'''


FORGE_OVER_CHANNEL = '''
import time
from harness import channel
if channel.active():  # the in-process forging the sandbox leaves: records sent as the bootstrap sends them
    _w = channel.RecordWriter("events.jsonl")
    for s in range(500):
        _w.write({"kind": "step", "attempt": 0, "step": 1000 + s, "t": time.time(), "dt": 0.001, "rss_mb": 100.0})
'''


def submission(tmp_path: Path, script: str, extra: dict[str, str] | None = None) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "train.py").write_text(script)
    for name, text in (extra or {}).items():
        (ws / name).write_text(text)
    return ws


def graded(tmp_path, ws, sandbox: bool = True):
    return grade(EX, GradeOptions(kind="workspace", workspace=ws, out_dir=tmp_path / "out",
                                  executor=executor_for(sandboxed=sandbox)))


def verdicts(res):
    return {c.name: c.passed for c in res.checks}


CASES = {
    # name: (script, extra files, checks that must fail); graded in the sandbox unless UNSANDBOXED
    # names it (what the run dir's signatures stop where there is no sandbox to stop it first)
    "prints PASSED and forges records over the broken script":
        (BROKEN.replace("def main() -> None:", FORGE + "\n\ndef main() -> None:"), None,
         ["memory_flat", "workload_intact"]),
    "forges records on top of a correct fix":
        (FIXED.replace("def main() -> None:", FORGE + "\n\ndef main() -> None:"), None, ["workload_intact"]),
    "forges step records over the channel to hide the leak":
        (BROKEN.replace("def main() -> None:", FORGE_OVER_CHANNEL + "\n\ndef main() -> None:"), None,
         ["memory_flat", "workload_intact"]),
    "fewer steps": (FIXED.replace("EPOCHS = 3", "EPOCHS = 2"), None, ["workload_intact"]),
    "smaller dataset": (FIXED.replace("DATASET_SIZE = 4096", "DATASET_SIZE = 2048"), None, ["workload_intact"]),
    "smaller global batch": (FIXED.replace("GLOBAL_BATCH = 64", "GLOBAL_BATCH = 32"), None, ["workload_intact"]),
    "evaluates less often": (BROKEN.replace("EVAL_INTERVAL = 2", "EVAL_INTERVAL = 64"), None, ["workload_intact"]),
    "runs each rank as its own world of one":
        (FIXED.replace('    dist.init_process_group(backend="nccl" if gpu_per_rank() else "gloo")',
                       '    os.environ.update(WORLD_SIZE="1", RANK="0", MASTER_PORT=str(int(os.environ["MASTER_PORT"]) + 1 + int(os.environ["LOCAL_RANK"])))\n'
                       '    dist.init_process_group(backend="nccl" if gpu_per_rank() else "gloo")'),
         None, ["workload_intact"]),
    "edits a protected file (world size 1 in the manifest)":
        (FIXED, {"exercise.toml": (EX.dir / "exercise.toml").read_text().replace("world_size = 2", "world_size = 1")},
         ["workload_intact"]),
    "overwrites the harness's final parameters at exit":
        (FIXED.replace("def main() -> None:", OVERWRITE_PARAMS + "\n\ndef main() -> None:"), None,
         ["matches_reference"]),
}


UNSANDBOXED = {"prints PASSED and forges records over the broken script", "forges records on top of a correct fix",
               "overwrites the harness's final parameters at exit"}


# A rank that waits outside every collective is a straggler now (issue 30), ended at the run's own
# time limit (180 s) rather than the hang timeout: a grading of such a case may take that long.
@pytest.mark.timeout(600)
@pytest.mark.parametrize("case", list(CASES))
def test_gaming_does_not_pass(tmp_path, case):
    script, extra, must_fail = CASES[case]
    res = graded(tmp_path, submission(tmp_path, script, extra), sandbox=case not in UNSANDBOXED)
    assert not res.passed and res.score == 0 and not res.environment_failure
    assert res.isolation.kind == ("none" if case in UNSANDBOXED else "sandbox")
    v = verdicts(res)
    for name in must_fail:
        assert v[name] is False, (case, name, [c.message for c in res.checks])


def test_in_the_sandbox_the_run_dir_is_out_of_reach_and_the_attempt_is_flagged(tmp_path):
    """The final parameters the grader judges are the ones the parent received over the channel:
    a script that overwrites the run dir's copy at exit finds no run dir, and its fix is judged as
    the fix it is. What it tried is flagged for the interviewer."""
    res = graded(tmp_path, submission(tmp_path, FIXED.replace("def main() -> None:", OVERWRITE_PARAMS +
                                                              "\n\ndef main() -> None:")))
    assert verdicts(res)["matches_reference"] is True
    assert any(f.kind == "source" and "TRAINWRECK_RUN_DIR" in f.what for f in res.flags), res.flags


def test_honest_fix_passes_and_regrading_agrees(tmp_path):
    res = graded(tmp_path, submission(tmp_path, FIXED))
    assert res.passed and res.score == 1.0 and res.flags == [] and res.isolation.kind == "sandbox"
    again = regrade(GradeResult.read(res.result_path), EX)
    assert verdicts(again) == verdicts(res) and again.score == res.score


def test_broken_fails_for_the_leak_alone(tmp_path):
    res = grade(EX, GradeOptions(kind="broken", out_dir=tmp_path / "out"))
    assert verdicts(res) == {"completes": True, "memory_flat": False, "matches_reference": True,
                             "trajectory": True, "outputs_match": True, "workload_intact": True,
                             "checkpoint_valid": True}
    assert "MB per step" in res.check("memory_flat").message
