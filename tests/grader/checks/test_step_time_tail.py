"""step_time_tail on hand-built signed run dirs: a periodic stall and its evidence, and a stall
hidden by slowing every step."""

from __future__ import annotations

import pytest

from grader.checks.step_time_tail import Spec as StepTimeTail
from tests.grader.checks.stall_runs import judge


def stalled(n: int = 200, every_k: int = 20, base: float = 0.03, stall: float = 0.9) -> list[float]:
    return [base + (stall if s % every_k == 1 and s > 1 else 0.0) for s in range(1, n + 1)]


def tail(**kw) -> StepTimeTail:
    return StepTimeTail(**{"name": "step_time_tail", "max_p99_over_median": 3.0, **kw})


@pytest.mark.parametrize("dts, spec, passed, says", [
    ([0.03] * 200, tail(), True, "at most 1.00x the median"),
    ([0.03 + 0.01 * (s % 3) for s in range(200)], tail(), True, "bound 3x"),
    (stalled(), tail(), False, "steps 21, 41, 61 and 6 more took 0.93 s against a median of 0.030 s"),
    (stalled(every_k=150), tail(), True, "at most"),    # one stall in 200 steps is below the p99
    ([0.03] * 50, tail(), False, "a p99 needs at least 100"),
    ([5.0] + [0.03] * 199, tail(), True, "at most"),     # the first step pays for start-up
    ([5.0] + [0.03] * 199, tail(warmup_steps=0), True, "at most"),
])
def test_step_time_tail(tmp_path, dts, spec, passed, says):
    c = judge(tmp_path, spec, dts=dts)
    assert c.passed is passed and says in c.message, c.message
    if not passed and "steps" in says:
        assert c.evidence["ranks"][0]["slow_steps"][:3] == [21, 41, 61]
        assert c.evidence["ranks"][0]["p99_over_median"] > 25


@pytest.mark.parametrize("mine, reference, passed, says", [
    ([0.03] * 200, [0.03] * 200, True, "at most"),
    ([0.93] * 200, [0.03] * 200, False, "31.0x the reference run's"),   # every step padded to hide the stall
    ([0.93] * 200, None, False, "no reference run"),
])
def test_slowing_every_step_does_not_hide_a_stall(tmp_path, mine, reference, passed, says):
    c = judge(tmp_path, tail(max_median_over_reference=5.0),
              reference={"dts": reference} if reference else None, dts=mine)
    assert c.passed is passed and says in c.message, c.message


def cumulative(dts: list[float]) -> list[float]:
    out, t = [], 100.0
    for d in dts:
        t += d
        out.append(t)
    return out


@pytest.mark.parametrize("dts, rts, passed, says, clock", [
    # the rank reset its step timer after each stall: its dt says 0.03 s, the parent saw 0.93 s
    ([0.03] * 200, cumulative(stalled()), False, "steps 21, 41, 61 and 6 more took 0.93 s", "parent"),
    # an honest stall is the same by either clock
    (stalled(), cumulative(stalled()), False, "steps 21, 41, 61 and 6 more took 0.93 s", "parent"),
    # a dt inflated in the rank does not make a step slow the parent saw fast
    (stalled(), cumulative([0.03] * 200), True, "at most 1.00x", "parent"),
    # no receive times (a run without the record channel): the rank's dt is all there is
    (stalled(), None, False, "steps 21, 41, 61 and 6 more took 0.93 s", "rank"),
])
def test_step_times_are_the_parents(tmp_path, dts, rts, passed, says, clock):
    c = judge(tmp_path, tail(), dts=dts, rts=rts)
    assert c.passed is passed and says in c.message, c.message
    assert c.evidence["clock"] == clock


@pytest.mark.parametrize("rts, expect", [
    ([10.0, 10.5, 10.6, 11.6], [0.05, 0.5, 0.1, 1.0]),  # the first step keeps its own dt
    ([10.0, 10.5, 10.4], [0.05, 0.5, 0.0]),  # out of order by the parent's clock: never negative
])
def test_step_times_from_receive_times(tmp_path, rts, expect):
    from grader.evidence import load_run
    from grader.evidence.steptimes import step_times
    from tests.grader.checks.stall_runs import make_stall_run

    ev = load_run("main", make_stall_run(tmp_path / "run", dts=[0.05] * len(rts), rts=rts))
    got = step_times(ev, 1)
    assert got.source == "parent" and got.steps == list(range(1, len(rts) + 1))
    assert got.seconds == pytest.approx(expect)


def checkpoint_writes(every_k: int = 20, main: bool = True, size: int = 16 * 2**20, op: str = "save",
                      after_last: bool = False) -> list[dict]:
    """Rank 0's checkpoint writes at every k-th step of a 200-step run (times by the 0.03 s steps)."""
    steps = [200] if after_last else range(every_k, 200, every_k)
    return [{"op": op, "path": "out/ckpt.pt.tmp", "begin": s * 0.03 + 0.001, "end": s * 0.03 + 0.02, "step": s,
             "main": main, "bytes": size} for s in steps]


@pytest.mark.parametrize("saves, writes_off_loop, passed, says", [
    # torch.save of the whole state on the training thread every 20 steps: the steps are short, the
    # loop still waits for it
    (checkpoint_writes(), 2, False, "rank 0 wrote checkpoints on the training thread inside the step loop, "
                                    "in steps 21, 41, 61 and 6 more (torch.save of ckpt.pt.tmp, up to 16.0 MiB, 0.02 s each"),
    (checkpoint_writes(op="upload"), 2, False, "(an upload of ckpt.pt.tmp"),
    (checkpoint_writes(), 0, True, "at most"),  # not asked for
    (checkpoint_writes(main=False), 2, True, "at most"),  # a background writer
    (checkpoint_writes(after_last=True), 2, True, "at most"),  # the final checkpoint, after the loop
    (checkpoint_writes(every_k=150), 2, True, "at most"),  # once is not the loop's habit
    # a small file written in the loop beside a large checkpoint written in the background
    (checkpoint_writes(size=1000) + checkpoint_writes(main=False), 2, True, "at most"),
])
def test_checkpoint_writes_in_the_loop(tmp_path, saves, writes_off_loop, passed, says):
    c = judge(tmp_path, tail(writes_off_loop=writes_off_loop), dts=[0.03] * 200, saves=saves)
    assert c.passed is passed and says in c.message, c.message
    if not passed:
        assert c.evidence["loop_writes"][0]["steps"][:3] == [21, 41, 61]
