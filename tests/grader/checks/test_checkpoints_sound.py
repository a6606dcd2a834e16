"""checkpoints_sound on hand-built, signed run dirs (main, resume, resume_save): each way a
checkpoint can be unsound fails with a message that names the evidence; the manifest rejects
malformed settings in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from grader.checks import Context, run_check
from grader.checks.checkpoints_sound import Spec as CheckpointsSound
from grader.evidence import load_run
from grader.manifest import ManifestError, load_manifest
from tests.grader.fakes import FakeManifest
from tests.grader.rundirs import RunDirBuilder

STEPS, EVERY = 48, 8  # a checkpoint after every 8th step
KILL_STEP, SAVE_KILL_STEP = 29, 41
SPEC = CheckpointsSound(name="checkpoints_sound", kill_step=KILL_STEP, save_kill_step=SAVE_KILL_STEP)
PARAMS = {"w": torch.ones(4, 3), "b": torch.zeros(4)}
GOOD = {"model": PARAMS, "optimizer": {"state": {0: {"step": torch.tensor(8.0)}}, "param_groups": [{"lr": 0.1}]},
        "scheduler": {"last_epoch": 8, "base_lrs": [0.1]}, "step": 8}




class Run:
    """One run dir being built: per-rank events (fingerprints around a restart), the save trace,
    and the files the script left in work/."""

    def __init__(self, root: Path, faults: list[dict] | None = None):
        self.root, self.faults = root, faults or []
        self.saves: dict[int, list[dict]] = {0: [], 1: []}
        self.seq = 0
        self.restart_t: float | None = None
        self.resumed_from: float | None = None
        self.killed_after = STEPS
        self.status = "ok"
        (root / "work" / "out").mkdir(parents=True, exist_ok=True)

    def path(self, rel: str) -> str:
        return str(self.root / "work" / rel)

    def op(self, rank, op, rel, step, t, a=0, src=None, finished=True, error=None):
        self.seq += 1
        begin = {"a": a, "seq": self.seq, "ph": "begin", "op": op, "path": self.path(rel), "step": step,
                 "main": True, "t": t}
        if src:
            begin["src"] = self.path(src)
        self.saves[rank].append(begin)
        if error:
            self.saves[rank].append({"a": a, "seq": self.seq, "ph": "error", "op": op, "err": error,
                                     "dur": 0.01, "step": step, "main": True, "t": t + 0.01})
        elif finished:
            self.saves[rank].append({"a": a, "seq": self.seq, "ph": "end", "op": op, "dur": 0.01,
                                     "bytes": 10, "step": step, "main": True, "t": t + 0.01})
        return self

    def drop(self, pred):
        """Remove the operations whose begin record matches ``pred`` (with their end records)."""
        for rank, recs in self.saves.items():
            gone = {x["seq"] for x in recs if x["ph"] == "begin" and pred(x)}
            self.saves[rank] = [x for x in recs if x["seq"] not in gone]
        return self

    def atomic(self, rank, rel, step, t, tmp=None):
        tmp = tmp or rel + ".tmp"
        return self.op(rank, "save", tmp, step, t).op(rank, "rename", rel, step, t + 0.1, src=tmp)

    def file(self, rel: str, obj=None, raw: bytes | None = None):
        p = Path(self.path(rel))
        if raw is not None:
            p.write_bytes(raw)
        else:
            torch.save(obj, p)
        return self

    def restart(self, at: float, killed_after: int, from_step: float, loads: list[str] = ()):
        """Attempt 0 ends after step ``killed_after``; attempt 1 begins at time ``at`` from the
        parameters after attempt 0's step ``from_step`` (0: the initial ones; a fraction: parameters
        the job never had), and every rank loads ``loads``."""
        self.restart_t, self.killed_after, self.resumed_from = at, killed_after, from_step
        for rank in (0, 1):
            for rel in loads:
                self.op(rank, "load", rel, 0, at + 1, a=1)
        return self

    def build(self) -> Path:
        b = RunDirBuilder(self.root, status=self.status, config={"faults": self.faults}, failure=None if
                          self.status == "ok" else {"rank": 1, "reason": "exception", "note": None,
                                                    "error": "Traceback ...\nRuntimeError: unexpected EOF"})
        for r in (0, 1):
            b.event(r, kind="boot", attempt=0, t=0.0, pid=1, rank=r)
            b.event(r, kind="fingerprint0", attempt=0, t=0.5, fp=0.0)
            last = STEPS if self.restart_t is None else self.killed_after
            for s in range(1, last + 1):
                b.event(r, kind="step", attempt=0, t=float(s), step=s, dt=0.01, rss_mb=1.0, lr=[0.1], fp=float(s))
            if self.restart_t is not None:
                b.event(r, kind="boot", attempt=1, t=self.restart_t, pid=2, rank=r)
                b.event(r, kind="fingerprint0", attempt=1, t=self.restart_t + 2, fp=self.resumed_from)
                b.event(r, kind="step", attempt=1, t=self.restart_t + 3, step=1, dt=0.01, rss_mb=1.0, lr=[0.1],
                        fp=1000.0)
            b.exit(r, PARAMS, attempt=1 if self.restart_t is not None else 0, t=500.0, steps=STEPS)
            for rec in self.saves[r]:
                b.save_record(r, **rec)
        return b.build()


def sound(root: Path) -> dict[str, Run]:
    """Rank 0 checkpoints atomically after every 8th step; the restarts resume from the newest
    checkpoint on every rank."""
    runs = {"main": Run(root / "main"),
            "resume": Run(root / "resume", [{"rank": 1, "step": KILL_STEP, "when": "step", "attempt": 0}]),
            "resume_save": Run(root / "resume_save", [{"rank": r, "step": SAVE_KILL_STEP, "when": "save",
                                                       "attempt": 0} for r in (0, 1)])}
    for role, run in runs.items():
        last = {"main": STEPS, "resume": 24, "resume_save": 40}[role]
        for s in range(EVERY, last + 1, EVERY):
            run.atomic(0, f"out/ckpt_{s:03d}.pt", s, float(s)).file(f"out/ckpt_{s:03d}.pt", GOOD)
    runs["resume"].restart(100.0, KILL_STEP, 24, ["out/ckpt_024.pt"])
    runs["resume_save"].op(0, "save", "out/ckpt_048.pt.tmp", 48, 48.0, finished=False)
    runs["resume_save"].file("out/ckpt_048.pt.tmp", raw=b"PK\x03\x04half")
    runs["resume_save"].restart(100.0, 48, 40, ["out/ckpt_040.pt"])
    return runs


def judge(runs: dict[str, Run], spec=SPEC):
    ev = {role: load_run(role, run.build()) for role, run in runs.items()}
    return run_check(spec, Context(FakeManifest(), ev))


def _shared_writes(r):
    for run in r.values():
        run.atomic(1, "out/ckpt_008.pt", 8, 8.5, tmp="out/ckpt_008.pt.tmp1")


def _in_place(r):
    r["main"].op(0, "save", "out/ckpt_024.pt", 24, 60.0)


def _torn_in_place(r):
    run = r["resume_save"]
    run.drop(lambda x: "048" in x["path"])
    run.op(0, "save", "out/ckpt_048.pt", 48, 48.0, finished=False).op(0, "load", "out/ckpt_048.pt", 0, 101.0, a=1)


def _unloadable(r):
    r["main"].file("out/ckpt_016.pt", raw=b"PK\x03\x04 not a whole zip")


def _weights_only(r):
    for run in r.values():
        run.file("out/ckpt_024.pt", PARAMS)


def _from_scratch(r):
    r["resume"].resumed_from = 0.0


def _older(r):
    r["resume"].resumed_from = 16.0


def _unknown_start(r):
    r["resume"].resumed_from = 12.5


def _never_saves(r):
    for run in r.values():
        run.saves = {0: [], 1: []}
        for f in Path(run.path("out")).iterdir():
            f.unlink()
    r["resume"].resumed_from = 0.0
    r["resume_save"].restart_t = None


def _no_torn_save(r):
    run = r["resume_save"]
    run.restart_t, run.resumed_from = None, None
    run.drop(lambda x: x["op"] == "load" or "048" in x["path"])


def _restart_crashes(r):
    r["resume_save"].status = "failed"


def _staging_torn_under_unique_name(r):
    # an atomic writer with mkstemp-style names: the torn staging file is never read, never published
    run = r["resume_save"]
    run.drop(lambda x: "048" in x["path"])
    run.op(0, "save", "out/tmpk3j9x2", 48, 48.0, finished=False).file("out/tmpk3j9x2", raw=b"PK\x03")


def _nested_layout(r):
    for run in r.values():
        for s in range(EVERY, STEPS + 1, EVERY):
            if Path(run.path(f"out/ckpt_{s:03d}.pt")).exists():
                run.file(f"out/ckpt_{s:03d}.pt", {"state": {"net": PARAMS, "opt": GOOD["optimizer"]}})


def _copy_into_read_path(r):
    r["main"].op(0, "copy", "out/ckpt_024.pt", 30, 60.0, src="out/ckpt_024.pt.tmp")


@pytest.mark.parametrize("damage, passed, says", [
    (None, True, "began from the newest complete checkpoint"),
    (_shared_writes, False, "ranks 0 and 1 both wrote out/ckpt_008.pt in the main run (rank 1 at step 8)"),
    (_in_place, False, "torch.save wrote straight into out/ckpt_024.pt, a file a restart loads (rank 0 at step 24"),
    (_copy_into_read_path, False, "file copy wrote straight into out/ckpt_024.pt"),
    (_torn_in_place, False, "rank 0 was killed half-way through a torch.save straight into out/ckpt_048.pt "
                            "(step 48), and the restarted job then loaded that file"),
    (_unloadable, False, "out/ckpt_016.pt on disk at the end of the main run does not load"),
    (_weights_only, False, "out/ckpt_024.pt, a file a restart loads, holds no optimizer state (it holds a dict "
                           "of 2 entries: w, b)"),
    (_from_scratch, False, "rank 0 began from the initial parameters, although the checkpoint of step 24 "
                           "(out/ckpt_024.pt) was complete on disk"),
    (_older, False, "began from the parameters after step 16, although the checkpoint of step 24"),
    (_unknown_start, False, "began from parameters the job never had before the kill"),
    (_never_saves, False, "no checkpoint was complete on disk when the resume run restarted: the job began "
                          "again from the initial parameters"),
    (_no_torn_save, False, "no rank began a checkpoint write (torch.save to a file, or a file of a "
                         "torch.distributed.checkpoint) at or after step 41"),
    (_restart_crashes, False, "the job killed during a checkpoint write did not complete after its restart "
                              "(status failed): rank 1 raised RuntimeError: unexpected EOF"),
    (_staging_torn_under_unique_name, True, "began from the newest complete checkpoint"),
    (_nested_layout, True, "began from the newest complete checkpoint"),
])
def test_checkpoints_sound(tmp_path, damage, passed, says):
    runs = sound(tmp_path)
    if damage:
        damage(runs)
    c = judge(runs)
    assert c.passed is passed and says in c.message, c.message


def test_required_state_is_recognised_by_content(tmp_path):
    runs = sound(tmp_path)
    for run in runs.values():
        run.file("out/ckpt_024.pt", {"model": PARAMS, "optimizer": GOOD["optimizer"]})
    spec = CheckpointsSound(name="checkpoints_sound", kill_step=KILL_STEP, save_kill_step=SAVE_KILL_STEP,
                            require=["model", "optimizer", "scheduler"])
    c = judge(runs, spec)
    assert not c.passed and "holds no LR scheduler state" in c.message


def test_a_missing_restart_run_is_an_environment_failure(tmp_path):
    runs = sound(tmp_path)
    ev = {role: load_run(role, run.build()) for role, run in runs.items() if role != "resume_save"}
    c = run_check(SPEC, Context(FakeManifest(), ev))
    assert not c.passed and c.environment and "no resume_save run" in c.message


EXERCISE = Path(__file__).resolve().parents[3] / "exercises" / "checkpoint-resume"


@pytest.mark.parametrize("edit, says", [
    (None, None),
    (("kill_step = 29\n", ""), "checks[1].kill_step: Field required; add it"),
    (("kill_step = 29", "kill_step = 0"), "checks[1].kill_step: Input should be greater than 0"),
    (("save_kill_step = 41", "save_kill_step = -1"), "checks[1].save_kill_step: Input should be greater than 0"),
    (('require = ["model", "optimizer"]', 'require = ["model", "weights"]'), "checks[1].require[1]: Input should be"),
    (("kill_rank = 1", "kill_rank = 1\nkill_at = 3"), "checks[1].kill_at: Extra inputs are not permitted; remove it"),
])
def test_manifest_fields(tmp_path, edit, says):
    d = tmp_path / "checkpoint-resume"
    d.mkdir()
    text = (EXERCISE / "exercise.toml").read_text()
    if edit:
        assert edit[0] in text
        text = text.replace(edit[0], edit[1])
    (d / "exercise.toml").write_text(text)
    (d / "train.py").write_text("")
    if says is None:
        assert load_manifest(d).check("checkpoints_sound").kill_step == 29
        return
    with pytest.raises(ManifestError) as e:
        load_manifest(d)
    assert says in str(e.value) and "\n" not in str(e.value), str(e.value)
