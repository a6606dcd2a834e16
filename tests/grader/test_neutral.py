"""grader.neutral: recorded logs read as a container's job would print them, and the logs shipped
with every exercise do (they come from ``trainwreck record``, which applies it)."""
from __future__ import annotations

import json
import re
import sys

import pytest

from grader.exercises import KIT_ROOT
from grader.neutral import BIN, SITE, Neutral

EXERCISES = sorted(p.parent for p in (KIT_ROOT / "exercises").glob("*/baseline.json"))
PURELIB = __import__("sysconfig").get_paths()["purelib"]


@pytest.fixture
def neutral(tmp_path):
    return Neutral(KIT_ROOT / "exercises" / "memory-leak", KIT_ROOT, tmp_path / "run", entry="train.py")


def test_a_traceback_loses_the_harness_frames_and_the_checkout(neutral):
    ex, h = KIT_ROOT / "exercises" / "memory-leak", KIT_ROOT / "harness"
    log = (f'Traceback (most recent call last):\n'
           f'  File "{ex}/train.py", line 9, in main\n    loss.backward()\n'
           f'  File "{h}/work.py", line 149, in backward\n    return fn(*args, **kwargs)\n           ^^^^^^^^^^^\n'
           f'  File "{PURELIB}/torch/_tensor.py", line 623, in backward\n    torch.autograd.backward(\n'
           f'RuntimeError: boom at {ex}/ckpt.pt\n')
    assert neutral.text(log) == (
        'Traceback (most recent call last):\n'
        '  File "/workspace/train.py", line 9, in main\n    loss.backward()\n'
        f'  File "{SITE}/torch/_tensor.py", line 623, in backward\n    torch.autograd.backward(\n'
        'RuntimeError: boom at /workspace/ckpt.pt\n')


def test_the_launcher_s_lines_name_the_script_and_a_plain_interpreter(neutral, tmp_path):
    rel = PURELIB.removeprefix(str(KIT_ROOT) + "/")
    log = (f"E1126 api.py:1002] {rel}/torch/x.py failed of binary: {sys.executable}\n"
           f"harness.bootstrap FAILED\nrun dir {tmp_path}/run/ranks/0\n")
    out = neutral.text(log)
    assert f"of binary: {BIN}/" in out and "\ntrain.py FAILED\n" in out and "/workspace/run/ranks/0" in out
    assert str(KIT_ROOT) not in out and "harness" not in out
    if PURELIB.startswith(str(KIT_ROOT) + "/"):  # a venv in the checkout: the launcher prints it relative
        assert f"{SITE}/torch/x.py" in out


def test_json_values_are_read_as_logs(neutral):
    ex = KIT_ROOT / "exercises" / "memory-leak"
    got = neutral.value({"last_location": f"{ex}/train.py:76", "n": 3, "frames": [
        f"{KIT_ROOT}/harness/collectives.py:409", f"{ex}/train.py:76"]})
    assert got == {"last_location": "/workspace/train.py:76", "n": 3, "frames": ["/workspace/train.py:76"]}


def test_a_path_that_only_starts_like_the_exercise_is_left_alone(neutral):
    ex = KIT_ROOT / "exercises" / "memory-leak"
    assert neutral.path(f"{ex}-old/x {ex}/y") == f"{ex}-old/x /workspace/y"


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda p: p.name)
def test_shipped_logs_name_no_machine_of_ours(ex):
    texts = [p.read_text(encoding="utf-8") for p in sorted((ex / "logs").iterdir())]
    texts.append(json.dumps(json.loads((ex / "baseline.json").read_text())))
    for t in texts:
        assert ".venv" not in t and "harness.bootstrap" not in t and '/harness/' not in t
        for path in re.findall(r'File \\?"([^"\\]+)', t):
            assert path.startswith(("/workspace/", "/usr/local/lib/", "<")), path
