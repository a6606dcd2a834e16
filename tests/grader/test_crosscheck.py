"""A rank's reports about itself held against the parent's own samples (grader.crosscheck)."""

from __future__ import annotations

import os
import re

import pytest

from grader import crosscheck
from grader import flags as flags_mod
from harness import rundir
from tests.grader.rundirs import KEY, RunDirBuilder
from tests.grader.test_isolation import sandboxed_run


def flags(tmp_path, **kw):
    return crosscheck.disagreements("main", sandboxed_run(tmp_path / "main", **kw), KEY)


def test_a_rank_that_hides_its_leak_from_its_reports_is_flagged_with_the_gap(tmp_path):
    found = flags(tmp_path, inside_rss=lambda s: 300.0, outside_rss=lambda s: 300.0 + 2.0 * s)
    assert [f.kind for f in found] == ["disagree", "disagree"]  # both ranks
    gap = re.search(r"rank 0 reported its memory (\d+) MB below what the parent sampled", found[0].what)
    assert gap and 55 <= int(gap[1]) <= 65, found[0].what  # 2 MB a step, the median of 58 steps


def test_honest_reports_within_the_measured_noise_are_not_flagged(tmp_path):
    # the largest honest single-step gap measured was 8.7 MB, the largest median 0.73 MB
    wobble = lambda s: 300.0 + 2.0 * s + (8.7 if s % 7 == 0 else 0.7)  # noqa: E731
    assert flags(tmp_path, inside_rss=wobble, outside_rss=lambda s: 300.0 + 2.0 * s) == []


def test_a_report_above_what_was_sampled_is_flagged_too(tmp_path):
    found = flags(tmp_path, inside_rss=lambda s: 900.0, outside_rss=lambda s: 300.0)
    assert found and "above what the parent sampled" in found[0].what


def test_too_few_sampled_steps_say_nothing(tmp_path):
    assert flags(tmp_path, inside_rss=lambda s: 100.0, outside_rss=lambda s: 900.0, steps=12, sample_every=6) == []


def test_the_flag_reaches_the_grading_from_a_sandboxed_run(tmp_path):
    run = sandboxed_run(tmp_path / "main", inside_rss=lambda s: 100.0, outside_rss=lambda s: 100.0 + 3.0 * s)
    rundir.atomic_write_json(run / "sandbox.json", {"isolated": True})
    assert [f.kind for f in flags_mod.run_flags("main", run)] == ["disagree", "disagree"]


def test_steps_released_in_a_burst_are_flagged_for_the_cpu_they_did_not_cost(tmp_path):
    """Held back and sent at the end: 40 steps arrive between the last two samples, on 1 ms of CPU."""
    burst = flags(tmp_path, inside_rss=lambda s: 300.0, outside_rss=lambda s: 300.0, steps=60,
                  received=lambda s: float(s) + 0.01 if s <= 20 else 59.5 + s / 1000,
                  cpu=lambda s: float(min(s, 58)) * 0.004 + (0.001 if s == 60 else 0.0))
    assert [f.kind for f in burst] == ["disagree", "disagree"]
    assert re.search(r"rank 0 claimed 4\d steps on \d+ ms of its CPU", burst[0].what), burst[0].what


def test_honest_steps_at_the_cheapest_measured_cost_are_not_flagged(tmp_path):
    # 2.05 ms of CPU a step was the cheapest honest interval measured; here 1 ms, twice under it
    assert flags(tmp_path, inside_rss=lambda s: 300.0, outside_rss=lambda s: 300.0, cpu=lambda s: s * 0.001) == []


def test_a_few_cheap_steps_are_jitter_not_a_flag(tmp_path, monkeypatch):
    def cheap(s):  # no CPU at all over two intervals of 2 steps each: 4 steps claimed cheaply
        return 0.004 * (s - (2 if s >= 20 else 0) - (2 if s >= 40 else 0))

    assert flags(tmp_path, inside_rss=lambda s: 300.0, outside_rss=lambda s: 300.0, cpu=cheap) == []
    monkeypatch.setattr(crosscheck, "MIN_CHEAP_STEPS", 4)  # the same run, counted: 4 cheap steps
    assert "claimed 4 steps on 0 ms" in flags(tmp_path / "again", inside_rss=lambda s: 300.0,
                                               outside_rss=lambda s: 300.0, cpu=cheap)[0].what


def test_a_sample_of_a_killed_rank_being_torn_down_is_not_held_against_its_reports(tmp_path):
    """A rank the parent killed from outside: 30 steps sampled at 300 MB, then 40 steps that arrived
    after the last live sample, and one more sample as the process went (8 MB). Its reports (300 MB)
    were true; the steps are not interpolated toward the dying process's sample."""
    from tests.grader.rundirs import RunDirBuilder

    b = RunDirBuilder(tmp_path / "main", sandbox={"isolated": True})
    for s in range(1, 71):
        rt = float(s) + 0.01 if s <= 30 else 30.4 + 0.005 * (s - 30)
        b.event(0, kind="step", attempt=0, t=rt, rt=rt, step=s, dt=1.0, rss_mb=300.0, lr=[0.1])
    for s in range(2, 31, 2):
        b.add(0, "proc.jsonl", a=0, t=float(s) + 0.3, pid=100, rss_mb=300.0, tree_rss_mb=300.0, procs=1)
    b.add(0, "proc.jsonl", a=0, t=30.7, pid=100, rss_mb=8.0, tree_rss_mb=8.0, procs=1)
    assert crosscheck.disagreements("main", b.build(), KEY) == []


def _saved(tmp_path, changed_after_s: float | None):
    """Rank 0 saves work/out/ckpt.pt, its end received at t=1000; the file then last changed at
    1000 + ``changed_after_s`` (None: no file left)."""
    run = tmp_path / "main"
    ckpt = run / "work" / "out" / "ckpt.pt"
    b = RunDirBuilder(run, world_size=1)
    b.add(0, rundir.SAVES, a=0, seq=1, ph="begin", op="save", path=str(ckpt), step=5, t=999.0, main=True)
    b.add(0, rundir.SAVES, a=0, seq=1, ph="end", op="save", t=999.5, rt=1000.0, bytes=4)
    b.build()
    if changed_after_s is not None:
        ckpt.parent.mkdir(parents=True)
        ckpt.write_bytes(b"data")
        os.utime(ckpt, (1000.0 + changed_after_s, 1000.0 + changed_after_s))
    return run


def test_a_traced_file_changed_after_its_last_traced_write_is_flagged(tmp_path):
    found = crosscheck.untraced_writes("main", _saved(tmp_path, 30.0), KEY)
    assert [f.kind for f in found] == ["disagree"]
    assert found[0].what.startswith("out/ckpt.pt changed 30.0 s after the last write the save trace saw"), found[0].what


@pytest.mark.parametrize("after", [-0.5, 0.007, None])  # 0.007 s: the latest honest file measured
def test_a_file_as_its_traced_write_left_it_or_gone_is_not(tmp_path, after):
    assert crosscheck.untraced_writes("main", _saved(tmp_path, after), KEY) == []
