"""Step records held back in the rank (grader/checks/_held.py): a record of a later step that
reached the parent long before the step's own record says the step record was held, whatever time
it carries; step_time_tail and memory_flat then refuse to time or place the steps by those records
(the hostile suite's hold-records-stall and hold-records-leak)."""

from __future__ import annotations

import pytest

from grader.checks import Context, run_check
from grader.checks._held import held_back
from tests.grader.fakes import FakeManifest, spec


def _run(root, steps=120, held_from=None, release_at=500.0, stream="collectives.jsonl", leak=0.0):
    """A sandboxed 2-rank run, a step a second: step records (rt just after t), and per step a record of
    ``stream`` carrying its step number; the parent's memory samples of each rank's tree. From step
    ``held_from`` on, the step records reach the parent only at ``release_at``, 10 ms apart, each
    stamped with the time it was sent and a flat 100 MB."""
    from grader.evidence import load_run
    from tests.grader.rundirs import RunDirBuilder

    b = RunDirBuilder(root, sandbox={"isolated": True})
    for r in range(2):
        for s in range(1, steps + 1):
            rt = float(s) + 0.01
            if held_from is not None and s >= held_from:
                rt = release_at + 0.01 * s
            b.event(r, kind="step", attempt=0, t=rt - 0.001, rt=rt, step=s, dt=1.0, rss_mb=100.0, lr=[0.1])
            if stream == "samples.jsonl":
                b.sample(r, s, step=s, rt=float(s) + 0.2)
            elif stream == "saves.jsonl":
                b.save_record(r, a=0, t=float(s) + 0.1, rt=float(s) + 0.1, step=s, kind="begin", op="save",
                              path="out/x.pt", main=True)
            else:
                b.add(r, stream, a=0, seq=s, op="allreduce", ph="enter", step=s, t=float(s) + 0.2, rt=float(s) + 0.3)
            b.add(r, "proc.jsonl", a=0, t=float(s) + 0.5, pid=100 + r, rss_mb=300.0 + leak * s,
                  tree_mb=300.0 + leak * s, gen=0, procs=1)
        b.exit(r, t=release_at + 5.0, steps=steps)
    return load_run(root.name, b.build())


@pytest.mark.parametrize("stream", ["collectives.jsonl", "samples.jsonl", "saves.jsonl"])
def test_an_honest_run_holds_nothing_back(tmp_path, stream):
    ev = _run(tmp_path / "main", stream=stream)
    assert held_back(ev, 0) is None and held_back(ev, 1) is None


@pytest.mark.parametrize("stream, what", [("collectives.jsonl", "the collective trace"),
                                          ("samples.jsonl", "the sample ledger"),
                                          ("saves.jsonl", "the save trace")])
def test_step_records_sent_after_later_records_were_held(tmp_path, stream, what):
    h = held_back(_run(tmp_path / "main", held_from=1, stream=stream), 0)
    assert h is not None and h.held == 120 and h.step == 1 and what in h.sentence(), h


def test_an_unsandboxed_run_is_not_judged(tmp_path):
    from grader.evidence import load_run
    from tests.grader.rundirs import RunDirBuilder

    b = RunDirBuilder(tmp_path / "main")
    b.event(0, kind="step", attempt=0, t=9.0, rt=9.0, step=1, dt=1.0, rss_mb=1.0)
    b.add(0, "collectives.jsonl", a=0, step=1, t=1.0, rt=1.0)
    assert held_back(load_run("main", b.build()), 0) is None


def test_step_time_tail_will_not_time_held_records(tmp_path):
    ctx = Context(FakeManifest(), {"main": _run(tmp_path / "main", held_from=1)})
    c = run_check(spec("step_time_tail", max_p99_over_median=3.0, min_steps=100), ctx)
    assert not c.passed and "held back" in c.message and "p99 step time" not in c.message, c.message
    honest = run_check(spec("step_time_tail", max_p99_over_median=3.0, min_steps=100),
                       Context(FakeManifest(), {"main": _run(tmp_path / "honest")}))
    assert honest.passed, honest.message


def test_memory_flat_will_not_place_memory_on_held_records(tmp_path):
    ctx = Context(FakeManifest(), {"main": _run(tmp_path / "main", held_from=1, leak=2.0)})
    c = run_check(spec("memory_flat", warmup_steps=10, max_slope_mb_per_step=0.1), ctx)
    assert not c.passed and "held back" in c.message and "cannot be placed" in c.message, c.message
    honest = run_check(spec("memory_flat", warmup_steps=10, max_slope_mb_per_step=0.1),
                       Context(FakeManifest(), {"main": _run(tmp_path / "honest")}))
    assert honest.passed, honest.message


def test_held_records_are_a_tampering_flag(tmp_path):
    from grader import crosscheck

    held = _run(tmp_path / "main", held_from=1)
    flags = crosscheck.held_records("main", held.run_dir)
    assert [f.kind for f in flags] == ["tampering", "tampering"] and "held back" in flags[0].what, flags
    assert crosscheck.held_records("main", _run(tmp_path / "honest").run_dir) == []


# ---- every stream held alike (the hostile suite's hold-everything-leak) ----------------------
def _burst(root, steps=120, release_at=None, spacing=0.001, sample_at=(), cpu_per_step=0.05, leak=2.0, spin=0.0):
    """A sandboxed 2-rank run, a step a second, whose step records and collective trace (every
    stream) reach the parent at ``release_at``, ``spacing`` apart, in order, each claiming a flat
    100 MB; honest (each record as its step ends) where ``release_at`` is None. The parent samples
    each rank's own process every 0.5 s while it runs (its CPU grows ``cpu_per_step`` a second, its
    memory ``leak`` MB a second; after training ``spin`` CPU-seconds a second), and at the extra
    times ``sample_at``."""
    from grader.evidence import load_run
    from tests.grader.rundirs import RunDirBuilder

    b = RunDirBuilder(root, sandbox={"isolated": True})
    end = float(steps) + 0.5 if release_at is None else release_at + spacing * steps + 0.2
    times = sorted({*(0.5 * k for k in range(1, int(end / 0.5) + 1)), *sample_at})
    for r in range(2):
        for s in range(1, steps + 1):
            rt = float(s) + 0.01 if release_at is None else release_at + spacing * s
            b.event(r, kind="step", attempt=0, t=rt - 0.0005, rt=rt, step=s, dt=1.0,
                    rss_mb=100.0 if release_at is not None else 300.0 + leak * s, lr=[0.1])
            b.add(r, "collectives.jsonl", a=0, seq=s, op="allreduce", ph="enter", step=s, t=rt, rt=rt + 0.0002)
        for t in times:
            worked = min(t, float(steps))  # training ends at the last step; the rank then idles until it exits
            b.add(r, "proc.jsonl", a=0, t=t, pid=100 + r, rss_mb=300.0 + leak * worked, tree_mb=300.0 + leak * worked,
                  cpu_s=1.0 + cpu_per_step * worked + spin * max(t - steps, 0.0), gen=0, procs=1)
        b.exit(r, t=end + 0.1, steps=steps)
    return load_run(root.name, b.build())


MEMORY = spec("memory_flat", warmup_steps=10, max_slope_mb_per_step=0.1)


def test_a_burst_no_sample_falls_in_is_held_back_against_the_reference(tmp_path):
    ref = _burst(tmp_path / "reference", leak=0.0)
    burst = _burst(tmp_path / "main", release_at=130.0)  # after the last sample: none among its steps
    assert held_back(burst, 0) is None  # nothing arrived out of order, and no sample interval holds it
    c = run_check(MEMORY, Context(FakeManifest(), {"main": burst, "reference": ref}))
    assert not c.passed and "held back" in c.message and "apart" in c.message, c.message
    assert "100 MB" not in c.message and c.evidence["held_back"]["records"] == 120
    # the honest fix of the same exercise against the same reference is judged from the samples
    honest = run_check(MEMORY, Context(FakeManifest(), {"main": _burst(tmp_path / "honest", leak=0.0),
                                                        "reference": ref}))
    assert honest.passed, honest.message


def test_a_burst_at_the_reference_pace_is_not_taken_for_one(tmp_path):
    ref = _burst(tmp_path / "reference", leak=0.0)
    fast = _burst(tmp_path / "main", release_at=130.0, spacing=0.2, leak=0.0)  # 5x the reference's pace
    from grader.checks._held import against_reference

    assert against_reference(fast, ref, 0) is None


def test_steps_that_arrived_on_too_little_cpu_were_held_back(tmp_path):
    # samples every 0.5 s through the release: 120 steps arrive within one interval that holds no CPU
    ev = _burst(tmp_path / "main", release_at=121.0, spacing=0.002, cpu_per_step=0.05, sample_at=(121.5,))
    h = held_back(ev, 0)
    assert h is not None and h.cpu_ms is not None and h.held == 120, h
    assert "under 0.2 ms a step" in h.sentence()
    assert held_back(_burst(tmp_path / "honest"), 0) is None


def test_reports_that_disagree_with_the_samples_are_not_the_fallback(tmp_path):
    # released after training over 0.3 s with one sample among the steps (too few to place them
    # on), spinning its CPU so that no interval looks unworked, no reference run: the flat 100 MB
    # the rank reports is far below the 540 MB the parent sampled
    ev = _burst(tmp_path / "main", release_at=130.05, spacing=0.0025, sample_at=(130.2,), spin=1.0)
    assert held_back(ev, 0) is None
    c = run_check(MEMORY, Context(FakeManifest(), {"main": ev}))
    assert not c.passed and "do not describe the steps" in c.message and "below" in c.message, c.message
    assert c.evidence["reports_off_mb"] < -200
