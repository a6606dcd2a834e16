"""workload_intact: steps, samples, distinct samples, world size, protected files, forged lines."""

from __future__ import annotations

import pytest
import torch

from grader.checks import Context, run_check
from grader.evidence import load_run
from tests.grader.fakes import FakeManifest, W, ctx_for, epochs, perm, spec


@pytest.mark.parametrize("kw, protected, passed, says", [
    ({"steps": 16, "ledgers": epochs([perm(0), perm(1)])}, [], True, "files as shipped"),
    ({"steps": 8, "ledgers": epochs([perm(0)])}, [], False, "made 8 optimizer steps"),
    ({"steps": 16, "ledgers": {0: perm(0)[:32] * 2, 1: perm(0)[32:] * 2}}, [], True, "files as shipped"),
    ({"steps": 16, "ledgers": {0: list(range(32)) * 2, 1: list(range(32)) * 2}}, [], False, "32 distinct samples"),
    ({"steps": 16, "ledgers": epochs([perm(0), perm(1)]), "world_size": 1}, [], False, "the exercise runs 2"),
    ({"steps": 16, "ledgers": epochs([perm(0), perm(1)])}, ["exercise.toml"], False, "protected files differ"),
])
def test_workload_intact(tmp_path, kw, protected, passed, says):
    kw = {**kw, "params": {r: {"w": torch.zeros(3)} for r in range(kw.get("world_size", W))}}
    ctx = ctx_for(tmp_path, main=kw)
    ctx.protected_changed = protected
    c = run_check(spec("workload_intact"), ctx)
    assert c.passed is passed and says in c.message, c.message


@pytest.mark.parametrize("steps, passed, says", [
    (14, True, "files as shipped"),   # two batches skipped on every rank: still read, both epochs whole
    (16, True, "files as shipped"),   # none skipped (the bad records repaired instead)
    (13, False, "made 13 optimizer steps; the workload is 16 (at least 14: 2 may be skipped)"),
])
def test_a_workload_with_skippable_steps_takes_that_many_fewer(tmp_path, steps, passed, says):
    """A brief that lets a step whose batch holds a corrupt record be skipped (on every rank) names how
    many such batches there are; the skipped batches are read all the same."""
    ctx = ctx_for(tmp_path, main={"steps": steps, "ledgers": epochs([perm(0), perm(1)]),
                                  "params": {r: {"w": torch.zeros(3)} for r in range(W)}})
    ctx.manifest.workload = ctx.manifest.workload.model_copy(update={"steps": 16, "skippable_steps": 2})
    c = run_check(spec("workload_intact"), ctx)
    assert c.passed is passed and says in c.message, c.message


def test_workload_intact_fails_on_forged_records(tmp_path):
    ctx = ctx_for(tmp_path, main={"steps": 16, "ledgers": epochs([perm(0), perm(1)]),
                                  "params": {r: {"w": torch.zeros(3)} for r in range(W)}})
    with open(tmp_path / "main" / "ranks" / "0" / "samples.jsonl", "a") as f:
        f.write('{"a": 0, "ds": "train", "i": 5, "s": 0, "mac": "00000000000000000000000000000000"}\n')
        f.write('{"a": 0, "ds": "train", "i": 6, "s": 0}\n')
    ctx = Context(ctx.manifest, {"main": load_run("main", tmp_path / "main")})
    c = run_check(spec("workload_intact"), ctx)
    assert not c.passed and "2 record lines in the main run dir were not written by the harness" in c.message


def _eval_run(tmp_path, reads):
    """``reads``: (rank, step, indices[, rt]) of the validation split (16 samples; the workload makes
    2 evaluations of 8): ``step`` is the ledger's ``s``, ``rt`` the parent's receive time (the step
    records' times are 1.0, 2.0, ...: rt 7.5 is half-way through step 8's iteration)."""
    from grader.manifest import Evaluation, Workload
    from tests.grader.rundirs import RunDirBuilder

    b = RunDirBuilder(tmp_path / "main")
    for r in range(W):
        b.event(r, kind="start", attempt=0, t=0.0, pid=1, rank=r)
        for s in range(1, 17):
            b.event(r, kind="step", attempt=0, t=float(s), step=s, dt=0.01, rss_mb=1.0, lr=[0.1])
        b.exit(r, {"w": torch.zeros(3)}, t=20.0, steps=16)
        order = epochs([perm(0), perm(1)])[r]
        for i in order:
            b.sample(r, i)
    for rank, step, idx, *rt in reads:
        b.add(rank, "samples.jsonl", a=0, ds="val", i=list(idx), s=step, **({"rt": rt[0]} if rt else {}))
    ctx = Context(FakeManifest(), {"main": load_run("main", b.build())})
    ctx.manifest.workload = Workload(dataset_size=64, global_batch=8, steps=16, params=3,
                                     evaluations={"val": Evaluation(count=2, samples=8)})
    return run_check(spec("workload_intact"), ctx)


FIRST, SECOND, SPLIT = range(8), range(8, 16), range(16)


@pytest.mark.parametrize("reads, passed, says", [
    ([(0, 8, range(4)), (1, 8, range(4, 8)), (0, 16, range(4)), (1, 16, range(4, 8))], True, "files as shipped"),
    ([(0, 8, range(8)), (0, 16, range(8))], True, "files as shipped"),   # rank 0 alone scores the whole split
    ([(0, 8, range(8)), (1, 8, range(8)), (0, 16, range(8)), (1, 16, range(8))], True, "files as shipped"),
    ([(0, 8, FIRST), (1, 8, FIRST), (0, 16, SECOND), (1, 16, SECOND)], True, "files as shipped"),  # the split in turn
    # persistent loader workers forked before step 1 read the whole split for both evaluations at once,
    # on every rank (their ``s`` is 0); the parent received them at once
    ([(0, 0, SPLIT, 0.3), (1, 0, SPLIT, 0.35)], True, "files as shipped"),
    ([(0, 0, SPLIT, 0.3)], True, "files as shipped"),  # ... on rank 0 alone
    # ranks take turns: rank 0 scores the batch at step 4, rank 1 the same batch at step 16
    ([(0, 3, FIRST, 3.5), (1, 15, FIRST, 15.5)], True, "files as shipped"),
    # ... within EVAL_WINDOW_STEPS of each other: one evaluation (what a rank's late worker looks like)
    ([(0, 7, FIRST, 7.5), (1, 11, FIRST, 11.5)], False, "as many as 1 evaluations of 8"),
    # workers of a loader that is not persistent, forked at step 8: the batch of step 8 and the next
    ([(0, 7, FIRST, 7.5), (0, 7, SECOND, 7.6), (1, 7, FIRST, 7.7), (1, 7, SECOND, 8.2)], True, "files as shipped"),
    # shrunk: one evaluation instead of two
    ([(0, 8, range(8))], False, "the ranks read 8 samples of 'val' over the run (a sample counted once per "
                                "evaluation, whichever rank or loader worker read it): as many as 1 evaluations of "
                                "8; the workload makes 2 evaluations of 8 (16 samples)"),
    ([(0, 0, FIRST, 0.3), (1, 0, FIRST, 0.35)], False, "as many as 1 evaluations of 8"),  # every rank, once
    ([(0, 8, FIRST), (1, 8, FIRST)], False, "as many as 1 evaluations of 8"),
    # shrunk: half of each evaluation
    ([(0, 8, range(4)), (0, 16, range(4))], False, "only 4 distinct samples of 'val' were read over the whole run, by "
                                                   "all ranks; each evaluation of the workload reads 8"),
    ([(0, 8, range(4)), (0, 16, range(4, 8)), (1, 8, range(4)), (1, 16, range(4, 8))], False,
     "as many as 1 evaluations of 8"),
    ([], False, "no rank read 'val': 0 evaluations were made; the workload makes 2"),  # skipped
])
def test_evaluations_are_judged_by_what_all_ranks_read_together(tmp_path, reads, passed, says):
    c = _eval_run(tmp_path, reads)
    assert c.passed is passed and says in c.message, c.message


@pytest.mark.parametrize("first, passed", [(FIRST, False), (SPLIT, True)])
def test_reads_before_the_first_step_are_dated_from_the_scripts_start(tmp_path, first, passed):
    """The first step comes seconds after the script starts (10 s here), the next ones 0.1 s apart:
    loader workers forked before step 1 read at 1 s on rank 0 and at 6 s on rank 1 (started late).
    Both are in step 1's iteration (0.1 and 0.6 of it): one evaluation, whichever rank was late.
    Dated by the later steps' pace they were 50 steps apart, and counted twice."""
    from grader.manifest import Evaluation, Workload
    from tests.grader.rundirs import RunDirBuilder

    b = RunDirBuilder(tmp_path / "main")
    for r in range(W):
        b.event(r, kind="start", attempt=0, t=0.0, pid=1, rank=r)
        for s in range(1, 17):
            b.event(r, kind="step", attempt=0, t=10.0 + 0.1 * (s - 1), step=s, dt=0.1, rss_mb=1.0, lr=[0.1])
        b.exit(r, {"w": torch.zeros(3)}, t=20.0, steps=16)
        for i in epochs([perm(0), perm(1)])[r]:
            b.sample(r, i)
        b.add(r, "samples.jsonl", a=0, ds="val", i=list(first), s=0, rt=1.0 + 5.0 * r)
    ctx = Context(FakeManifest(), {"main": load_run("main", b.build())})
    ctx.manifest.workload = Workload(dataset_size=64, global_batch=8, steps=16, params=3,
                                     evaluations={"val": Evaluation(count=2, samples=8)})
    c = run_check(spec("workload_intact"), ctx)
    assert c.passed is passed and (passed or "as many as 1 evaluations of 8" in c.message), c.message


# -- work done around the records: backward passes, rows fed, autocast, contradicting records ------

def _work_run(root, steps=16, backward=None, rows=None, reads=None, autocast=None, compute=None, backward_compute=None, attempt1=None, tail_rows=None,
              saves=(), uploads=(), rt_lag=None, overflow=None, read_rt=False, trained=None, micro=None, blind=None,
              legacy=False):
    """A finished 2-rank run whose step records carry the work fields. ``backward``/``rows``: step ->
    value (default 1 backward, 4 rows); ``reads``: step -> samples read during that step's iteration
    (default 4); ``autocast``, ``compute``: step -> dict (default {"float16": 1}, {"bfloat16": 1}); ``attempt1``: (backward passes of
    its first step, steps) of a restarted attempt; ``saves``: (dur, wall) of traced saves; ``uploads``:
    (dur, wall) of store uploads; ``rt_lag``: step -> parent receive time minus record time;
    ``read_rt``: the ledger records carry the parent's receive time, half a second before the
    record of the step whose iteration read them (as under the sandbox's record channel);
    ``trained``/``micro``/``blind``: step -> the samples its backward passes reached (default: the
    rows fed), the largest forward pass among them (default: ``trained``), its backward passes that
    reached no counted forward call (default 0); ``legacy``: records without those three (an older
    harness), judged by backward passes. ``attempt1``'s first step trains on its passes' samples."""
    from harness import rundir
    from tests.grader.rundirs import RunDirBuilder

    b = RunDirBuilder(root)
    order = {r: epochs([perm(0), perm(1)])[r] for r in range(W)}
    for r in range(W):
        b.event(r, kind="start", attempt=0, t=0.0, pid=1, rank=r)
        idx = iter(order[r] * 2)  # past the end: the next epoch's first samples, read ahead
        for s in range(1, steps + 1):
            for _ in range((reads or {}).get(s, 4)):
                b.sample(r, next(idx), step=s - 1, **({"rt": s - 0.5} if read_rt else {}))
            rec = {"kind": "step", "attempt": 0, "t": float(s), "step": s, "dt": 1.0, "rss_mb": 1.0, "lr": [0.1],
                   "backward_passes": (backward or {}).get(s, 1), "forward_calls": 1,
                   "forward_rows": (rows or {}).get(s, 4), "autocast": (autocast or {}).get(s, {"float16": 1}),
                   "compute": (compute or {}).get(s, {"bfloat16": 1})}
            if backward_compute is not None:
                rec["backward_compute"] = backward_compute.get(s, {})
            if not legacy:
                n = (trained or {}).get(s, rec["forward_rows"])
                rec.update(backward_rows=n, backward_max_rows=(micro or {}).get(s, n),
                           backward_blind=(blind or {}).get(s, 0))
            if rt_lag is not None:
                rec["rt"] = float(s) + rt_lag(s)
            if overflow == s:  # the grading injected inf into this step's gradients after its backward
                b.event(r, kind="overflow", attempt=0, t=float(s) - 0.5, step=s, param="w")
            b.event(r, **rec)
        attempt = 0
        if attempt1:
            n, k = attempt1
            attempt = 1
            for s in range(1, k + 1):
                more = {} if legacy else {"backward_rows": 4 * n if s == 1 else 4, "backward_max_rows": 4,
                                          "backward_blind": (blind or {}).get(s, 0)}
                b.event(r, kind="step", attempt=1, t=100.0 + s, step=s, dt=1.0, rss_mb=1.0, lr=[0.1],
                        backward_passes=n if s == 1 else 1, forward_calls=1, forward_rows=4, **more)
        for i, (dur, wall) in enumerate(saves):
            b.save_record(r, a=0, seq=i + 1, ph="begin", op="save", path=f"/w/c{i}.pt", step=3, t=3.1, main=True)
            b.save_record(r, a=0, seq=i + 1, ph="end", op="save", dur=dur, bytes=10, step=3, t=3.1 + wall, main=True)
        for i, (dur, wall) in enumerate(uploads):
            seq = 100 + i
            b.save_record(r, a=0, seq=seq, ph="begin", op="copy", path=f"/store/.c{i}.pt.partial", src="/w/c.pt",
                          step=5, t=5.1, main=True)
            b.save_record(r, a=0, seq=seq, ph="end", op="copy", dur=0.001, bytes=10, step=5, t=5.101, main=True)
            b.event(r, kind="upload", attempt=0, t=5.1 + wall, path=f"/store/c{i}.pt", bytes=10, dur=dur, step=5)
        b.exit(r, {"w": torch.zeros(3)}, attempt=attempt, t=50.0, steps=steps,
               **({"tail_forward_rows": tail_rows} if tail_rows is not None else {}))
    del rundir
    return load_run(root.name, b.build())


def _judge_work(tmp_path, main=None, resume=None, **workload):
    from grader.manifest import Workload

    m = FakeManifest()
    m.workload = Workload(dataset_size=64, global_batch=8, steps=16, params=3, **workload)
    runs = {"main": main or _work_run(tmp_path / "main")}
    if resume is not None:
        runs["resume"] = resume
    return run_check(spec("workload_intact"), Context(m, runs))


def test_the_work_as_declared_passes(tmp_path):
    c = _judge_work(tmp_path, autocast="float16")
    assert c.passed, c.message


@pytest.mark.parametrize("kw, workload, says", [
    # a restart that retrains from scratch with updates the optimizer step hook never sees
    ({"attempt1": (48, 8)}, {}, "rank 0 trained on 192 samples at optimizer step 1 of attempt 1 in the main run (the "
                                "rows of the forward passes its backward passes reached; 1 of its 8 steps trained on "
                                "more than 4); the workload's effective batch is 8 samples per step, 4 per rank: "
                                "training the optimizer step hook never saw"),
    # ... with its losses computed without a module call: judged by backward passes
    ({"attempt1": (48, 8), "blind": {1: 47}}, {}, "rank 0 ran 48 backward passes for optimizer step 1 of attempt 1 in "
                                                  "the main run (1 of its 8 steps ran more than 1, through no forward "
                                                  "pass whose samples could be counted); the workload runs 1 per "
                                                  "optimizer step"),
    ({"attempt1": (48, 8), "legacy": True}, {}, "rank 0 ran 48 backward passes for optimizer step 1 of attempt 1"),
    # a few steps train on their batch four times over (4 passes over 4 rows each)
    ({"backward": {s: 4 for s in (3, 9)}, "trained": {s: 16 for s in (3, 9)}}, {},
     "rank 0 trained on 16 samples at optimizer step 3 in the main run (the rows of the forward passes its backward "
     "passes reached; 2 of its 16 steps trained on more than 4)"),
    # every step trains on twice the batch (a batch per rank that does not shrink with the world size)
    ({"rows": {s: 8 for s in range(1, 17)}, "reads": {s: 8 for s in range(1, 17)}}, {},
     "rank 0 trained on a median of 8 samples per optimizer step in the main run (the rows of the forward passes its "
     "backward passes reached); the workload's effective batch is 8 samples per step, 4 per rank: the batch grew"),
    ({"backward": {s: 4 for s in range(1, 17)}, "legacy": True}, {}, "rank 0 ran 4 backward passes for optimizer step 1"),
    # the step hook called once more after each real step: records of steps that trained nothing
    ({"backward": {s: 0 for s in range(2, 17, 2)}}, {}, "rank 0 recorded 8 of its 16 optimizer steps in the main run "
                                                        "with no backward pass (first at step 2)"),
    # the batch read whole, half of it trained on
    ({"trained": {s: 2 for s in range(1, 17)}}, {}, "rank 0 trained on a median of 2 samples per optimizer step in the "
                                                    "main run (the rows of the forward passes its backward passes "
                                                    "reached); the workload's effective batch is 8 per step, 4 per "
                                                    "rank: the batch shrank"),
    # four micro-batches folded into one larger batch per step
    ({}, {"backward_per_step": 4}, "rank 0 backpropagated forward passes of 4 samples (the median step's largest) in "
                                   "the main run; the workload accumulates micro-batches of 1 (4 per optimizer step at "
                                   "world size 2): folding them into fewer, larger batches changes the job"),
    ({"legacy": True}, {"backward_per_step": 4}, "rank 0 ran 1 backward passes per optimizer step (median) in the main "
                                                 "run; the workload accumulates 4 micro-batches per step"),
    # every rank feeds its model the whole global batch: twice what it read
    ({"rows": {s: 8 for s in range(1, 17)}}, {}, "rank 0's model was fed 24 rows by optimizer step 3 in the main run, "
                                                  "but the rank had read 12 samples through the kit's datasets"),
    ({"tail_rows": 64}, {}, "rows by the end of the run"),
    ({"autocast": {s: {"off": 1} for s in range(1, 17)}}, {"autocast": "float16"},
     "rank 0's forward passes ran without float16 autocast at 16 of its 16 optimizer steps (first at step 1; "
     "forward calls by autocast dtype: off x16)"),
    ({"autocast": {s: {"bfloat16": 1} for s in range(9, 17)}}, {"autocast": "float16"},
     "without float16 autocast at 8 of its 16 optimizer steps (first at step 9"),
    # a bf16 job trained in fp32 (the memory budget gone)
    ({"compute": {s: {"float32": 1} for s in range(1, 17)}}, {"compute_dtype": "bfloat16"},
     "rank 0 trained mostly outside bfloat16 at 16 of its 16 optimizer steps (first at step 1; trained rows, else "
     "forward calls, by compute dtype: float32 x16)"),
    # an fp32 model with a bf16 module called on the side: the rows trained on went through fp32
    ({"compute": {s: {"float32": 1, "bfloat16": 1} for s in range(1, 17)},
      "backward_compute": {s: {"float32": 4} for s in range(1, 17)}}, {"compute_dtype": "bfloat16"},
     "trained rows, else forward calls, by compute dtype: float32 x64"),
])
def test_work_around_the_records_fails(tmp_path, kw, workload, says):
    c = _judge_work(tmp_path, main=_work_run(tmp_path / "main", **kw), **workload)
    assert not c.passed and says in c.message, c.message


EVERY = range(1, 17)


@pytest.mark.parametrize("kw, workload", [
    # gradient accumulation over two micro-batches of 2, the same 4 samples per step (no declared micro-batches)
    ({"backward": {s: 2 for s in EVERY}, "micro": {s: 2 for s in EVERY}}, {}),
    # ... and one forward over the batch backpropagated twice (retain_graph): still its 4 samples
    ({"backward": {s: 2 for s in EVERY}}, {}),
    ({"backward": {s: 4 for s in EVERY}, "micro": {s: 1 for s in EVERY}}, {"backward_per_step": 4}),  # as declared
    ({"backward": {s: 4 for s in EVERY}, "legacy": True}, {"backward_per_step": 4}),  # as declared, older records
    ({"rows": {1: 5}, "trained": {1: 4}}, {}),                                # one probing forward of a row
    ({"reads": {1: 12, 2: 0, 3: 0, 4: 4}}, {}),                               # read ahead (workers prefetching)
    ({"autocast": {s: {"float16": 1, "off": 1} for s in range(1, 17)}}, {"autocast": "float16"}),  # eval outside it
    # bf16 weights without autocast (fp32 master copies in the optimizer) compute in bf16 too
    ({"autocast": {s: {"off": 1} for s in EVERY}}, {"compute_dtype": "bfloat16"}),
    # ... and norms kept in fp32 beside them: most trained rows still went through bf16
    ({"backward_compute": {s: {"bfloat16": 4} for s in EVERY}}, {"compute_dtype": "bfloat16"}),
])
def test_valid_work_in_other_shapes_passes(tmp_path, kw, workload):
    c = _judge_work(tmp_path, main=_work_run(tmp_path / "main", **kw), **workload)
    assert c.passed, c.message


def test_a_loaders_prefetch_past_the_last_step_is_not_a_bigger_workload(tmp_path):
    """Workers prefetching two batches past the last step (a loop that stops mid-epoch): 8 reads per
    rank that no step consumed, within half an epoch's share; a whole share more is not."""
    c = _judge_work(tmp_path, main=_work_run(tmp_path / "main", reads={16: 12}))
    assert c.passed, c.message
    c = _judge_work(tmp_path, main=_work_run(tmp_path / "more", reads={16: 24}))
    assert not c.passed and "the ranks consumed 168 samples in all" in c.message and "at most 32 more" in c.message, \
        c.message


# Reads ahead of the steps, in epoch shares: 64 samples, 2 ranks, a share of 32, 4 per step; 16 steps
# read 64 samples per rank in all, however they are spread over the iterations.
@pytest.mark.parametrize("reads, passed, says", [
    ({}, True, "files as shipped"),                                   # each iteration reads its batch
    ({1: 12, 2: 0, 3: 0}, True, "files as shipped"),                  # a loader prefetching 2 batches: 0.25
    ({1: 20, 2: 0, 3: 0, 4: 0, 5: 0}, True, "files as shipped"),      # 16 ahead: half a share, the bar
    ({1: 21, 2: 0, 3: 0, 4: 0, 5: 0, 6: 3}, False, "0.53 epoch shares (32 samples each) ahead of its steps"),
    ({8: 36, **{s: 0 for s in range(9, 17)}}, False, "by optimizer step 8 in the main run, where its steps had "
                                                      "consumed 32: 1.00 epoch shares"),  # the second epoch read at once
    ({1: 64, **{s: 0 for s in range(2, 17)}}, False,                  # featurised up front, reused every epoch
     "rank 0 had read 64 samples of 'train' by optimizer step 1 in the main run, where its steps had consumed 4: "
     "1.88 epoch shares (32 samples each) ahead of its steps, more than 0.5"),
])
def test_reads_far_ahead_of_the_steps_fail(tmp_path, reads, passed, says):
    c = _judge_work(tmp_path, main=_work_run(tmp_path / "main", reads=reads, read_rt=True))
    assert c.passed is passed and says in c.message, c.message
    assert c.evidence["read_ahead"]["main"][0]["shares"] == pytest.approx(
        max(sum(reads.get(i, 4) for i in range(1, s + 1)) - 4 * s for s in range(1, 17)) / 32, abs=1e-3)


def test_step_records_the_parent_took_late_do_not_count_as_reads_ahead(tmp_path):
    """A busy parent takes a rank's step records in a burst, seconds late, while its loader workers'
    reads arrive as they happen: the step's time is the earlier of the rank's stamp and the parent's."""
    run = _work_run(tmp_path / "main", reads={1: 12, 2: 0, 3: 0}, read_rt=True, rt_lag=lambda s: 10.0)
    c = _judge_work(tmp_path, main=run)
    assert c.passed, c.message
    assert c.evidence["read_ahead"]["main"][0]["shares"] == pytest.approx(0.25)


@pytest.mark.parametrize("read_rt, attempt, judged", [
    (False, 0, False),  # an unsandboxed run: the ledger has no receive times
    (True, 1, False),   # a restart may fast-forward by reading and discarding
    (True, 0, True),
])
def test_read_ahead_is_judged_where_the_records_can_tell(tmp_path, read_rt, attempt, judged):
    from grader.evidence.work import read_ahead
    from tests.grader.rundirs import RunDirBuilder

    b = RunDirBuilder(tmp_path / "run")
    for r in range(W):
        for i in range(32):
            b.sample(r, i, attempt=attempt, **({"rt": 0.5} if read_rt else {}))
        for s in range(1, 9):
            b.event(r, kind="step", attempt=attempt, t=float(s), step=s, dt=1.0, rss_mb=1.0)
    got = read_ahead(load_run("run", b.build()), 0, "train", 4)
    assert (got == {"step": 1, "read": 32, "consumed": 4, "ahead": 28}) if judged else got is None


def test_a_rank_cannot_hide_reads_by_stamping_its_steps_late(tmp_path):
    from grader.evidence.work import read_ahead
    from tests.grader.rundirs import RunDirBuilder

    b = RunDirBuilder(tmp_path / "run")
    for i in range(32):
        b.sample(0, i, rt=0.5)
    for s in range(1, 9):  # stamped an hour on, received on time
        b.event(0, kind="step", attempt=0, t=3600.0 + s, rt=float(s), step=s, dt=1.0, rss_mb=1.0)
    assert read_ahead(load_run("run", b.build()), 0, "train", 4)["ahead"] == 28


@pytest.mark.parametrize("overflow, backward, trained, legacy, passed, says", [
    (8, 2, 8, False, True, "files as shipped"),  # the script's own loss scaler skipped the overflowed iteration
    (8, 4, 8, False, True, "files as shipped"),  # ... each iteration in two micro-batches
    (8, 2, 8, True, True, "files as shipped"),   # ... older records: by backward passes
    (None, 2, 8, False, False, "rank 0 made 15 optimizer steps; the workload is 16"),  # no overflow: a step lost
    (8, 3, 12, False, False, "rank 0 made 15 optimizer steps"),  # more than the two iterations
    (8, 3, 8, True, False, "rank 0 made 15 optimizer steps"),    # ... older records
    (5, 2, 8, False, False, "rank 0 made 15 optimizer steps"),   # not at the injected step
])
def test_an_iteration_skipped_at_the_injected_overflow_is_an_iteration(tmp_path, overflow, backward, trained, legacy,
                                                                      passed, says):
    """A hand-written dynamic loss scaler (Megatron-LM's, DeepSpeed's) skips optimizer.step() on the
    overflow the grading injects: the harness's step 8 then spans two iterations."""
    run = _work_run(tmp_path / "main", steps=15, overflow=overflow, backward={8: backward}, rows={8: trained},
                    reads={8: 8}, legacy=legacy)
    c = _judge_work(tmp_path, main=run)
    assert c.passed is passed and says in c.message, c.message


@pytest.mark.parametrize("spans, skippable, passed, says", [
    ({8: 2}, 1, True, "files as shipped"),                  # step 8 spans the skipped iteration before it
    ({5: 2, 8: 2}, 2, True, "files as shipped"),
    ({5: 2, 8: 2}, 1, False, "rank 0 trained on 8 samples at optimizer step 5"),  # more than may be skipped
    ({8: 2}, 0, False, "rank 0 trained on 8 samples at optimizer step 8"),        # no step may be skipped
    ({8: 3}, 2, True, "files as shipped"),                  # two skipped iterations before step 8
])
def test_an_iteration_whose_optimizer_step_was_skipped_is_an_iteration(tmp_path, spans, skippable, passed, says):
    """A script that runs every backward pass and skips optimizer.step() on every rank (its all-reduced
    gradients are not finite) leaves that iteration's samples to the next step record: where the
    workload lets steps be skipped, a step of k + 1 whole batches spans k skipped iterations."""
    steps = 16 - sum(k - 1 for k in spans.values())
    run = _work_run(tmp_path / "main", steps=steps, backward=spans, trained={s: 4 * k for s, k in spans.items()},
                    rows={s: 4 * k for s, k in spans.items()}, reads={s: 4 * k for s, k in spans.items()})
    c = _judge_work(tmp_path, main=run, skippable_steps=skippable)
    assert c.passed is passed and says in c.message, c.message


def test_a_restarted_run_is_judged_too(tmp_path):
    c = _judge_work(tmp_path, resume=_work_run(tmp_path / "resume", attempt1=(40, 8)))
    assert not c.passed and "trained on 160 samples at optimizer step 1 of attempt 1 in the resume run" in c.message


@pytest.mark.parametrize("kw, says", [
    ({"saves": [(1.05, 0.01)]}, "rank 0's save of c0.pt says it took 1.050 s, but its own begin and end records "
                                "are 0.010 s apart"),
    ({"uploads": [(1.05, 0.048)]}, "rank 0's upload of c0.pt says it took 1.050 s, but the copy it made began "
                                   "0.048 s before its record"),
    ({"rt_lag": lambda s: -2.0}, "is dated 2.0 s after the parent received it"),
    ({"rt_lag": lambda s: 0.01 + 0.5 * s}, "rank 0's clock fell 5.5 s behind the parent's over 16 steps of attempt 0 (22.5 s by the parent's clock)"),
])
def test_records_that_contradict_each_other_fail(tmp_path, kw, says):
    c = _judge_work(tmp_path, main=_work_run(tmp_path / "main", **kw))
    assert not c.passed and "records of the main run contradict each other" in c.message and says in c.message, \
        c.message


@pytest.mark.parametrize("kw", [
    {"saves": [(0.5, 0.52)]},                                  # a slow save, honestly timed
    {"uploads": [(1.0, 1.02)]},
    {"rt_lag": lambda s: 0.005 + (1.5 if s in (7, 8) else 0.0)},  # the parent stalled a moment
])
def test_honest_timelines_agree(tmp_path, kw):
    c = _judge_work(tmp_path, main=_work_run(tmp_path / "main", **kw))
    assert c.passed, c.message


@pytest.mark.parametrize("passes, passed", [(2, True), (3, False)])
def test_a_run_at_world_size_one_may_accumulate_what_two_ranks_computed(tmp_path, passes, passed):
    from grader.manifest import Workload
    from tests.grader.rundirs import RunDirBuilder

    b = RunDirBuilder(tmp_path / "ws1", world_size=1)
    b.event(0, kind="start", attempt=0, t=0.0, pid=1, rank=0)
    for s in range(1, 17):
        for i in range(8):
            b.sample(0, (s * 8 + i) % 64, step=s - 1)
        b.event(0, kind="step", attempt=0, t=float(s), step=s, dt=1.0, rss_mb=1.0, lr=[0.1], backward_passes=passes,
                forward_calls=passes, forward_rows=8)
    b.exit(0, {"w": torch.zeros(3)}, t=20.0, steps=16)
    m = FakeManifest()
    m.workload = Workload(dataset_size=64, global_batch=8, steps=16, params=3)
    c = run_check(spec("workload_intact"), Context(m, {"main": _work_run(tmp_path / "main"),
                                                       "ws1": load_run("ws1", b.build())}))
    assert c.passed is passed, c.message
    if not passed:
        assert "ran 3 backward passes for optimizer step 1 in the ws1 run" in c.message and "runs 2 per optimizer step at world size 1" in c.message


def test_steps_that_each_consume_more_than_the_workloads_batch_read_ahead_of_nothing(tmp_path):
    """A batch size per rank that does not shrink with the world size: half the steps, each twice
    the batch. The step count fails; reading ahead is not what happened."""
    c = _judge_work(tmp_path, main=_work_run(tmp_path / "main", steps=8, reads={s: 8 for s in range(1, 9)},
                                             read_rt=True))
    assert not c.passed and "made 8 optimizer steps" in c.message and "ahead of its steps" not in c.message
    assert c.evidence["read_ahead"]["main"][0]["ahead"] == 0
