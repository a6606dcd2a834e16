"""checkpoint_valid: the checkpoint loads, holds the final parameters, has one writer (from the
save trace), and carries the values the reference run's checkpoint carries."""

from __future__ import annotations

import pytest
import torch

from grader.checks import Context, run_check
from grader.evidence import load_run
from tests.grader.fakes import FakeManifest, spec
from tests.grader.rundirs import RunDirBuilder

FINAL = {"w": torch.ones(3)}


def _run(root, ckpt=None, writers=(0,), final=FINAL):
    b = RunDirBuilder(root)
    for r in range(2):
        b.event(r, kind="start", attempt=0, t=0.0, pid=1, rank=r)
        b.event(r, kind="step", attempt=0, t=1.0, step=1, dt=0.01, rss_mb=1.0, lr=[0.1])
        b.exit(r, final, t=2.0, steps=1)
    if ckpt is not None:
        b.file("out/ckpt.pt", ckpt)
        path = str((b.work / "out" / "ckpt.pt").resolve())
        for r in writers:
            b.save_record(r, a=0, seq=1, ph="begin", op="save", path=path, step=1, main=True, t=1.5 + r)
            b.save_record(r, a=0, seq=1, ph="end", op="save", dur=0.1, bytes=100, step=1, main=True, t=1.6 + r)
    return load_run(root.name, b.build())


@pytest.mark.parametrize("writers, single_writer, passed, says", [
    ([0], True, True, "loads and holds the final parameters"),
    ([0, 1], True, False, "ranks 0 and 1 all wrote out/ckpt.pt"),  # every rank saving one path: a race
    ([0, 1], False, True, "loads and holds the final parameters"),   # an exercise may allow it
])
def test_checkpoint_valid_names_every_rank_that_wrote_the_file(tmp_path, writers, single_writer, passed, says):
    main = _run(tmp_path / "main", {"model": FINAL}, writers)
    s = spec("checkpoint_valid", path="out/ckpt.pt", single_writer=single_writer)
    c = run_check(s, Context(FakeManifest(), {"main": main}))
    assert c.passed is passed and says in c.message, c.message
    assert c.evidence["writers"] == writers


OPT = {"state": {0: {"momentum_buffer": torch.ones(3)}}, "param_groups": [{"lr": 0.1, "momentum": 0.9, "params": [0]}]}
SCALER = {"scale": 65536.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000, "_growth_tracker": 7}


@pytest.mark.parametrize("ckpt, fields, passed, says", [
    (None, {}, False, "no checkpoint at out/ckpt.pt"),
    ({"model": FINAL}, {"require": ["optimizer"]}, False, "holds no optimizer state"),
    ({"model": FINAL, "opt": OPT}, {"require": ["optimizer"]}, True, "holds the final parameters"),
    # an optimizer that keeps momentum, saved without it, is not its state
    ({"model": FINAL, "opt": {**OPT, "state": {}}}, {"require": ["optimizer"]}, False, "is hollow"),
    ({"model": {"w": torch.zeros(3)}}, {}, False, "is not the final model"),
    ({"model": {}}, {}, False, "holds no model state with the structure of the model the run trained"),
    ({"model": {"w": torch.ones(4)}}, {}, False, "holds no model state with the structure"),
    # whatever the keys and the wrapper: the model by structure, the scaler and the step by content
    ({"weights": FINAL}, {}, True, "holds the final parameters"),
    ({"state": {"net": {"module.lit.w": torch.ones(3)}}}, {}, True, "holds the final parameters"),
    ({"model": FINAL, "amp": SCALER, "iter_num": 1}, {"require": ["scaler", "step"]}, True, "final parameters"),
    ({"model": FINAL, "amp": {"scale": 1.0}}, {"require": ["scaler"]}, False, "holds no loss-scaler state"),
    # a hand-written dynamic scale: its scale and the count it grows by
    ({"model": FINAL, "scaler": {"scale": 32768.0, "growth_interval": 2000, "clean_steps": 17}},
     {"require": ["scaler"]}, True, "final parameters"),
    ({"model": FINAL, "iter_num": 7}, {"require": ["step"]}, False, "holds no step count"),
    # what a careful resume adds (RNG states, the config) changes nothing
    ({"model": FINAL, "rng": {"python": (3, tuple(range(625)), None), "torch": torch.zeros(8, dtype=torch.uint8)},
      "config": {"lr": 0.1}}, {}, True, "holds the final parameters"),
    ({"model": FINAL, "val_loss": 0.5}, {"reference_values": ["val_loss"]}, True, "val_loss as in the reference run"),
    ({"model": FINAL, "metrics": {"loss/val": 0.50000001}}, {"reference_values": ["val_loss"]}, True,
     "val_loss as in the reference run"),
    ({"model": FINAL, "val_loss": 0.7}, {"reference_values": ["val_loss"]}, False,
     "holds no value equal to the reference run's val_loss (within 0.0001 relative), under any key: it holds val_loss = 0.7"),
    ({"model": FINAL}, {"reference_values": ["val_loss"]}, False, "holds no value equal to the reference run's val_loss"),
])
def test_checkpoint_valid(tmp_path, ckpt, fields, passed, says):
    runs = {"main": _run(tmp_path / "main", ckpt),
            "reference": _run(tmp_path / "reference", {"model": FINAL, "val_loss": 0.5})}
    c = run_check(spec("checkpoint_valid", path="out/ckpt.pt", **fields),
                  Context(FakeManifest(), runs))
    assert c.passed is passed and says in c.message, c.message


def test_an_unloadable_checkpoint_says_why(tmp_path):
    b = RunDirBuilder(tmp_path / "main")
    for r in range(2):
        b.exit(r, FINAL, steps=1)
    b.file("out/ckpt.pt", raw=b"PK\x03\x04torn")
    c = run_check(spec("checkpoint_valid", path="out/ckpt.pt"),
                  Context(FakeManifest(), {"main": load_run("main", b.build())}))
    assert not c.passed and "does not load" in c.message


def test_the_evidence_never_holds_the_reference_value(tmp_path):
    runs = {"main": _run(tmp_path / "main", {"model": FINAL, "val_loss": 0.7}),
            "reference": _run(tmp_path / "reference", {"model": FINAL, "val_loss": 0.4321})}
    c = run_check(spec("checkpoint_valid", path="out/ckpt.pt", reference_values=["val_loss"]),
                  Context(FakeManifest(), runs))
    assert not c.passed and "0.4321" not in repr(c.evidence) + c.message


def _adam(scale: float, noise: float = 0.0) -> dict:
    torch.manual_seed(0)
    m = torch.randn(3)
    return {"state": {0: {"step": torch.tensor(5.0), "exp_avg": m * scale + noise * torch.randn(3),
                          "exp_avg_sq": (m * m) * scale ** 2}},
            "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999), "params": [0]}]}


@pytest.mark.parametrize("mine, passed, says", [
    # the same gradients, rounded on a 16-bit wire: within the tolerance, under another key
    ({"weights": FINAL, "adam": _adam(1.0, noise=1e-4)}, True, "and the optimizer's state as in the reference run"),
    # gradients summed where an average was meant: the parameters barely move, the moments are 2x, 4x
    ({"model": FINAL, "optimizer": _adam(2.0)}, False,
     "the optimizer's exp_avg in the checkpoint differs from a correct run's by 100.0% of the tensor's norm"),
    ({"model": FINAL}, False, "holds no optimizer state"),
])
def test_the_optimizer_state_is_compared_with_a_correct_runs_by_structure(tmp_path, mine, passed, says):
    runs = {"main": _run(tmp_path / "main", mine),
            "reference": _run(tmp_path / "reference", {"model": FINAL, "optimizer": _adam(1.0)})}
    c = run_check(spec("checkpoint_valid", path="out/ckpt.pt", optimizer_against_reference=0.05),
                  Context(FakeManifest(), runs))
    assert c.passed is passed and says in c.message, c.message
