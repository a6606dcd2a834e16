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
    s = spec("checkpoint_valid", path="out/ckpt.pt", key="model", single_writer=single_writer)
    c = run_check(s, Context(FakeManifest(), {"main": main}))
    assert c.passed is passed and says in c.message, c.message
    assert c.evidence["writers"] == writers


@pytest.mark.parametrize("ckpt, fields, passed, says", [
    (None, {}, False, "no checkpoint at out/ckpt.pt"),
    ({"model": FINAL}, {"require_keys": ["optimizer"]}, False, "has no optimizer"),
    ({"model": {"w": torch.zeros(3)}}, {}, False, "is not the final model"),
    ({"model": {}}, {}, False, "lacks parameters the model trained"),
    ({"weights": FINAL}, {}, False, "has no model state under 'model'"),
    ({"model": FINAL, "val_loss": 0.5}, {"reference_keys": ["val_loss"]}, True, "val_loss as in the reference run"),
    ({"model": FINAL, "val_loss": 0.7}, {"reference_keys": ["val_loss"]}, False,
     "the checkpoint's 'val_loss' is 0.7, 40.0% away from the reference run's"),
    ({"model": FINAL}, {"reference_keys": ["val_loss"]}, False, "the checkpoint's 'val_loss' is missing"),
])
def test_checkpoint_valid(tmp_path, ckpt, fields, passed, says):
    runs = {"main": _run(tmp_path / "main", ckpt),
            "reference": _run(tmp_path / "reference", {"model": FINAL, "val_loss": 0.5})}
    c = run_check(spec("checkpoint_valid", path="out/ckpt.pt", key="model", **fields),
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
    c = run_check(spec("checkpoint_valid", path="out/ckpt.pt", key="model", reference_keys=["val_loss"]),
                  Context(FakeManifest(), runs))
    assert not c.passed and "0.4321" not in repr(c.evidence) + c.message
