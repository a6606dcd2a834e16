"""The checkpoint reader: a candidate's pickle is loaded as their own resume loads it, in a process
of its own inside the sandbox, and whatever the pickle does stays there."""

from __future__ import annotations

import json
import pickle
import random
import uuid
from pathlib import Path

import pytest
import torch

from grader.evidence import reader
from grader.evidence.layouts import LayoutError, load_checkpoint
from harness.sandbox import probe

pytestmark = pytest.mark.slow  # starts processes of its own (seconds each)

needs_sandbox = pytest.mark.skipif(not probe().ok, reason="bubblewrap cannot run here")


class Runs:
    """``__reduce__`` runs ``code`` with exec when the file is unpickled."""

    def __init__(self, code: str):
        self.code = code

    def __reduce__(self):
        return (exec, (self.code,))


def run_dir(tmp_path: Path, obj=None, name: str = "ckpt.pt", raw: bytes | None = None) -> Path:
    d = tmp_path / "run"
    (d / "work").mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"key": "secret-run-key"}))
    if raw is not None:
        (d / "work" / name).write_bytes(raw)
    else:
        torch.save(obj, d / "work" / name)
    return d


@pytest.fixture
def sandboxed():
    with reader.isolated(True):
        yield


def test_a_checkpoint_the_scripts_own_resume_loads_is_read_whole(tmp_path):
    """What a careful resume keeps (Python's RNG state, numpy arrays, a whole module, a config
    object) is read, not refused as the grader's weights_only load did."""
    import numpy as np

    class Config:
        def __init__(self):
            self.lr = 0.1

    model = torch.nn.Linear(3, 2)
    d = run_dir(tmp_path, {"model": model, "rng": random.getstate(), "np": np.arange(3), "step": 7,
                           "loss": float("nan"), 0: (1, 2)})
    with reader.isolated(False):
        got = load_checkpoint(d / "work" / "ckpt.pt", d / "work")
    assert torch.equal(got["model"]["weight"], model.weight.detach())  # a module: its state dict
    assert got["rng"][0] == random.getstate()[0] and torch.equal(got["np"], torch.arange(3))
    assert got["step"] == 7 and got["loss"] != got["loss"] and got[0] == (1, 2)


@needs_sandbox
def test_code_in_a_pickle_runs_inside_the_sandbox_only(tmp_path, sandboxed):
    """It may write where the sandbox lets it (a private /tmp that dies with the reader), never on
    the machine, and never into the run it was read from."""
    marker = tmp_path / f"escaped-{uuid.uuid4().hex}"
    d = run_dir(tmp_path, {"model": {"w": torch.ones(2)}, "x": Runs(f"open({str(marker)!r}, 'w').write('x')")})
    got = load_checkpoint(d / "work" / "ckpt.pt", d / "work")
    assert torch.equal(got["model"]["w"], torch.ones(2)) and got["x"] is None
    assert not marker.exists()
    d2 = run_dir(tmp_path / "b", {"x": Runs(f"open({str(tmp_path / 'b' / 'run' / 'work' / 'dropped')!r}, 'w')")})
    with pytest.raises(LayoutError) as e:
        load_checkpoint(d2 / "work" / "ckpt.pt", d2 / "work")
    assert "Read-only file system" in str(e.value) or "OSError" in str(e.value), str(e.value)
    assert not (d2 / "work" / "dropped").exists()


@needs_sandbox
def test_the_run_key_is_not_in_the_readers_view(tmp_path, sandboxed):
    run = tmp_path / "run"
    code = f"result = open({str(run / 'run.json')!r}).read()"
    d = run_dir(tmp_path, {"leak": Runs(code + "\nimport builtins; builtins.leaked = result")})
    with pytest.raises(LayoutError) as e:
        load_checkpoint(d / "work" / "ckpt.pt", d / "work")
    assert "No such file" in str(e.value) or "FileNotFoundError" in str(e.value), str(e.value)


@needs_sandbox
def test_a_memory_bomb_is_stopped_by_the_readers_limit(tmp_path, sandboxed):
    d = run_dir(tmp_path, {"x": Runs("b = bytearray(8 << 30)")})
    with pytest.raises(LayoutError) as e:
        load_checkpoint(d / "work" / "ckpt.pt", d / "work")
    assert "MemoryError" in str(e.value) or "needs over" in str(e.value), str(e.value)


def test_a_pickle_that_never_ends_is_cut_off(tmp_path, monkeypatch):
    monkeypatch.setattr(reader, "TIMEOUT_S", 3.0)
    d = run_dir(tmp_path, {"x": Runs("while True: pass")})
    with reader.isolated(False), pytest.raises(LayoutError) as e:
        load_checkpoint(d / "work" / "ckpt.pt", d / "work")
    assert "did not load within 3 s" in str(e.value)
    # and the next file is read by a fresh reader, under the usual limit: starting one imports torch,
    # which took over 3 s on the 2-core machine under a load of 13 (the fast tier failed here)
    monkeypatch.setattr(reader, "TIMEOUT_S", 60.0)
    d2 = run_dir(tmp_path / "b", {"w": torch.ones(1)})
    with reader.isolated(False):
        assert torch.equal(load_checkpoint(d2 / "work" / "ckpt.pt", d2 / "work")["w"], torch.ones(1))


@pytest.mark.parametrize("raw, says", [
    (b"PK\x03\x04torn", "RuntimeError"),
    (pickle.dumps({"a": 1})[:-3], "UnpicklingError"),
])
def test_a_file_that_does_not_load_says_why(tmp_path, raw, says):
    d = run_dir(tmp_path, raw=raw)
    with reader.isolated(False), pytest.raises(LayoutError) as e:
        load_checkpoint(d / "work" / "ckpt.pt", d / "work")
    assert says in str(e.value)


def test_no_reader_outlives_the_judging(tmp_path):
    d = run_dir(tmp_path, {"w": torch.ones(1)})
    with reader.isolated(False):
        load_checkpoint(d / "work" / "ckpt.pt", d / "work")
        procs = [r.proc for r in reader._readers.values()]
        assert procs and all(p.poll() is None for p in procs)
    assert not reader._readers and all(p.poll() is not None for p in procs)
