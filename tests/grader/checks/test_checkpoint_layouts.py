"""Checkpoints that span several files, judged as one by checkpoints_sound (hand-built signed run
dirs, as in test_checkpoints_sound): a folder of files (model, optimizer, scheduler, trainer state,
as the HF Trainer lays it out) staged under a hidden name and published by one rename, and a
torch.distributed.checkpoint folder (per-rank files, then the ``.metadata`` that lists them). Valid
ones pass; a folder published before its last file was written, a DCP checkpoint missing a rank's
file, and a hollow optimizer state fail with a message that names the evidence."""

from __future__ import annotations

import json
import pickle
import warnings
from pathlib import Path

import pytest
import torch

from tests.grader.checks.test_checkpoints_sound import EVERY, GOOD, KILL_STEP, SAVE_KILL_STEP, STEPS, Run, judge

STATE = {**GOOD, "optimizer": {"state": {0: {"step": torch.tensor(8.0), "exp_avg": torch.ones(4, 3)},
                                         1: {"step": torch.tensor(8.0), "exp_avg": torch.ones(4)}},
                               "param_groups": [{"lr": 0.1, "betas": (0.9, 0.95), "params": [0, 1]}]}}
HOLLOW = {"state": {}, "param_groups": [{"lr": 0.1, "betas": (0.9, 0.95), "params": [0, 1]}]}
FILES = {"model.pt": "model", "optimizer.pt": "optimizer", "scheduler.pt": "scheduler"}


def write_dcp(folder: Path, state: dict, ranks: int = 2) -> list[str]:
    """A DCP checkpoint as ``ranks`` ranks leave it: its items spread over ``__<rank>_0.distcp``
    files, which its ``.metadata`` lists. Returns those files."""
    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(state, checkpoint_id=str(folder), no_dist=True)
    md = pickle.loads((folder / ".metadata").read_bytes())
    data = (folder / "__0_0.distcp").read_bytes()
    out = {r: bytearray() for r in range(ranks)}
    for i, (_, info) in enumerate(sorted(md.storage_data.items(), key=lambda kv: kv[1].offset)):
        chunk = data[info.offset:info.offset + info.length]
        info.relative_path, info.offset = f"__{i % ranks}_0.distcp", len(out[i % ranks])
        out[i % ranks] += chunk
    for r, b in out.items():
        (folder / f"__{r}_0.distcp").write_bytes(bytes(b))
    (folder / ".metadata").write_bytes(pickle.dumps(md))
    return [f"__{r}_0.distcp" for r in range(ranks)]


class Layout:
    """Writes one checkpoint of a layout into a run: its traced operations and its files on disk."""

    def __init__(self, kind: str):
        self.kind = kind

    def folder(self, step: int) -> str:
        return f"out/checkpoint-{step:03d}" if self.kind == "dir" else f"out/step-{step:03d}"

    def write(self, run: Run, step: int, t: float, state: dict = STATE, torn: bool = False) -> list[str]:
        """Returns the files a restart reads of it."""
        return (self._dir if self.kind == "dir" else self._dcp)(run, step, t, state, torn)

    def _dir(self, run: Run, step: int, t: float, state: dict, torn: bool) -> list[str]:
        final, stage = self.folder(step), f"out/.tmp-checkpoint-{step:03d}"
        Path(run.path(stage)).mkdir(parents=True, exist_ok=True)
        for i, (name, key) in enumerate(FILES.items()):
            if torn:  # killed half-way through the first file
                run.op(0, "save", f"{stage}/{name}", step, t, finished=False)
                Path(run.path(f"{stage}/{name}")).write_bytes(b"PK\x03\x04half")
                return []
            run.op(0, "save", f"{stage}/{name}", step, t + 0.01 * i)
            torch.save(state[key], run.path(f"{stage}/{name}"))
        Path(run.path(f"{stage}/trainer_state.json")).write_text(json.dumps({"global_step": step}))
        run.op(0, "rename", final, step, t + 0.05, src=stage)
        run.saves[0][-2]["dir"] = True
        Path(run.path(stage)).rename(run.path(final))
        return [f"{final}/{n}" for n in FILES]

    def _dcp(self, run: Run, step: int, t: float, state: dict, torn: bool) -> list[str]:
        d = self.folder(step)
        Path(run.path(d)).mkdir(parents=True, exist_ok=True)
        if torn:  # every rank killed half-way through its file
            for r in (0, 1):
                run.op(r, "write", f"{d}/__{r}_0.distcp", step, t, finished=False)
                Path(run.path(f"{d}/__{r}_0.distcp")).write_bytes(b"PK\x03\x04half")
            return []
        files = write_dcp(Path(run.path(d)), state)
        for r, f in enumerate(files):
            run.op(r, "write", f"{d}/{f}", step, t + 0.01 * r)
        run.op(0, "write", f"{d}/.metadata.tmp", step, t + 0.03)
        run.op(0, "rename", f"{d}/.metadata", step, t + 0.04, src=f"{d}/.metadata.tmp")
        run.op(0, "commit", d, step, t + 0.025)  # DCP's finish: the .metadata written aside and renamed, inside it
        begin, end = run.saves[0][-2:]
        begin.update(files=files, keys=sorted(state))
        end["t"] = t + 0.06
        return [f"{d}/.metadata", *(f"{d}/{f}" for f in files)]


def runs_with(tmp_path: Path, layout: Layout, state: dict = STATE) -> dict[str, Run]:
    """As test_checkpoints_sound.sound, in another layout: a checkpoint after every 8th step, the
    restarts reading the newest one whole."""
    runs = {"main": Run(tmp_path / "main"),
            "resume": Run(tmp_path / "resume", [{"rank": 1, "step": KILL_STEP, "when": "step", "attempt": 0}]),
            "resume_save": Run(tmp_path / "resume_save", [{"rank": r, "step": SAVE_KILL_STEP, "when": "save",
                                                           "attempt": 0} for r in (0, 1)])}
    reads = {}
    for role, run in runs.items():
        last = {"main": STEPS, "resume": 24, "resume_save": 40}[role]
        for s in range(EVERY, last + 1, EVERY):
            reads[(role, s)] = layout.write(run, s, float(s), state)
    layout.write(runs["resume_save"], 48, 48.0, torn=True)
    runs["resume"].restart(100.0, KILL_STEP, 24, reads[("resume", 24)])
    runs["resume_save"].restart(100.0, 48, 40, reads[("resume_save", 40)])
    return runs


DIR, DCP = Layout("dir"), Layout("dcp")


@pytest.mark.parametrize("layout", [DIR, DCP], ids=["folder", "dcp"])
def test_a_valid_checkpoint_of_several_files_passes(tmp_path, layout):
    c = judge(runs_with(tmp_path, layout))
    assert c.passed, c.message
    kind = "folders of files" if layout is DIR else "torch.distributed.checkpoint folders"
    assert kind in c.message and "began from the newest complete checkpoint" in c.message
    files = c.evidence["runs"]["resume"]["files"]
    assert files[layout.folder(24)]["layout"] == layout.kind and files[layout.folder(24)]["read_by_a_restart"]


def _renamed_before_its_last_file_was_written(runs):
    """The optimizer file is written by a background thread that is still going when the folder is
    renamed into place."""
    run = runs["resume"]
    seq = next(x["seq"] for x in run.saves[0] if x.get("path", "").endswith(".tmp-checkpoint-016/optimizer.pt"))
    for x in run.saves[0]:
        if x["seq"] == seq:
            x["t"] = 15.9 if x["ph"] == "begin" else 16.5  # begins before the rename (16.05), ends after


def _last_file_written_into_the_published_folder(runs):
    run = runs["resume"]
    run.op(0, "save", "out/checkpoint-024/scheduler.pt", 24, 24.2)


def _missing_a_ranks_file(runs):
    """Rank 1 never wrote its file of the step-24 checkpoint, and it is not on disk: the
    coordinator's metadata lists it all the same."""
    run = runs["resume"]
    run.drop(lambda x: x["path"].endswith("step-024/__1_0.distcp"))
    Path(run.path("out/step-024/__1_0.distcp")).unlink()


def _rewritten_in_place(runs):
    """The next checkpoint goes into the same folder: files the committed metadata lists are
    rewritten under it."""
    runs["resume"].op(1, "write", "out/step-016/__1_0.distcp", 20, 20.5)


def _hollow(runs, layout):
    for run in runs.values():
        for rel in list(Path(run.path("out")).rglob("optimizer.pt")):
            torch.save(HOLLOW, rel)
        for d in Path(run.path("out")).glob("step-*"):
            if (d / ".metadata").exists():
                write_dcp(d, {**STATE, "optimizer": HOLLOW})


@pytest.mark.parametrize("layout, damage, says", [
    (DIR, _renamed_before_its_last_file_was_written,
     "in the resume run out/checkpoint-016 was published (renamed into place at step 16) while optimizer.pt in it "
     "was still being written (rank 0)"),
    (DIR, _last_file_written_into_the_published_folder,
     "torch.save wrote into out/checkpoint-024/scheduler.pt after out/checkpoint-024 was published"),
    (DCP, _missing_a_ranks_file,
     "in the resume run out/step-024 was committed (its .metadata written at step 24) while __1_0.distcp, which its "
     "metadata lists, held nothing complete"),
    (DCP, _rewritten_in_place, "DCP write wrote into out/step-016/__1_0.distcp after out/step-016 was committed"),
    (DIR, _hollow, "holds no optimizer state (the one it holds is hollow: its param_groups are an optimizer's that "
                   "keeps per-parameter state (betas), and it holds no per-parameter state)"),
    (DCP, _hollow, "holds no optimizer state (the one it holds is hollow"),
], ids=["folder renamed early", "folder written after publish", "dcp missing a rank's file", "dcp rewritten",
        "folder hollow optimizer", "dcp hollow optimizer"])
def test_a_broken_checkpoint_of_several_files_fails(tmp_path, layout, damage, says):
    runs = runs_with(tmp_path, layout)
    damage(runs, layout) if damage is _hollow else damage(runs)
    c = judge(runs)
    assert not c.passed and says in c.message, c.message


def test_a_dcp_checkpoint_missing_a_file_on_disk_does_not_load(tmp_path):
    runs = runs_with(tmp_path, DCP)
    Path(runs["main"].path("out/step-048/__0_0.distcp")).unlink()
    c = judge(runs)
    assert not c.passed and ("out/step-048 (a torch.distributed.checkpoint) on disk at the end of the main run does "
                             "not load (__0_0.distcp, which its .metadata lists, is missing)") in c.message, c.message


def test_a_single_file_with_a_hollow_optimizer_state_fails(tmp_path):
    from tests.grader.checks.test_checkpoints_sound import sound

    runs = sound(tmp_path)
    for run in runs.values():
        run.file("out/ckpt_024.pt", {**STATE, "optimizer": HOLLOW})
    c = judge(runs)
    assert not c.passed and ("out/ckpt_024.pt, a file a restart loads, holds no optimizer state (the one it holds is "
                             "hollow") in c.message, c.message


def test_what_a_restart_read_counts_as_a_whole_not_file_by_file(tmp_path):
    """The folder layout: the file a restart loads first (the model) holds no optimizer state, and
    that is fine; a restart that loads only the model file is not."""
    runs = runs_with(tmp_path, DIR)
    assert judge(runs).passed
    runs = runs_with(tmp_path / "only_model", DIR)
    for run in runs.values():
        run.drop(lambda x: x["op"] == "load" and not x["path"].endswith("model.pt"))
    c = judge(runs)
    assert not c.passed and ("what rank 0's restart in the resume run loaded (out/checkpoint-024) holds no "
                             "optimizer state") in c.message, c.message
