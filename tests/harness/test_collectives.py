"""The collective trace's own machinery, in this process: the buffer and when it leaves (per
optimizer step, on a timer, at exit, after a fork), and the caller lookup's per-code-object cache.
What a real job's trace holds is tested by launching one (test_launch, test_real_world)."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from harness import collectives, instrument


class Batches:
    """A record writer that keeps each ``write_many`` batch."""

    def __init__(self) -> None:
        self.batches: list[list[dict]] = []

    def write(self, record: dict) -> None:
        self.batches.append([record])

    def write_many(self, records: list[dict]) -> None:
        self.batches.append(list(records))

    def records(self) -> list[dict]:
        return [r for b in self.batches for r in b]


@pytest.fixture
def slow_timer(monkeypatch):
    """The flusher thread waits longer than any test: only the flush under test sends."""
    monkeypatch.setattr(collectives, "FLUSH_S", 60.0)


def traced(tracer: collectives.Tracer, n: int) -> None:
    """``n`` completed collectives: an enter and an exit each."""
    t = torch.ones(4)
    for _ in range(n):
        tracer._done(tracer.issue("all_reduce", (t,), {}, False, "allreduce_"))


def test_records_wait_in_the_buffer_and_leave_in_order_in_one_batch(slow_timer):
    w = Batches()
    tracer = collectives.Tracer(w, 0, lambda: 7)
    traced(tracer, 3)
    assert w.batches == []
    tracer.flush()
    tracer.flush()  # nothing left: no empty batch
    assert len(w.batches) == 1
    assert [(r["seq"], r["ph"]) for r in w.records()] == [(1, "enter"), (1, "exit"), (2, "enter"), (2, "exit"),
                                                          (3, "enter"), (3, "exit")]
    assert w.records()[0]["step"] == 7 and w.records()[0]["dtype"] == "float32"


def test_a_long_buffer_leaves_in_chunks_in_order(slow_timer, monkeypatch):
    # Each write lets the training thread take the GIL: a batch of a fast job's records is not
    # signed in one go.
    monkeypatch.setattr(collectives, "FLUSH_CHUNK", 4)
    w = Batches()
    tracer = collectives.Tracer(w, 0, lambda: 1)
    traced(tracer, 5)
    tracer.flush()
    assert [len(b) for b in w.batches] == [4, 4, 2]
    assert [(r["seq"], r["ph"]) for r in w.records()] == [(s, ph) for s in range(1, 6) for ph in ("enter", "exit")]


def test_a_blocked_rank_s_records_leave_within_the_flush_interval(monkeypatch):
    monkeypatch.setattr(collectives, "FLUSH_S", 0.05)
    w = Batches()
    tracer = collectives.Tracer(w, 0, lambda: 0)
    tracer.issue("barrier", (), {}, None, "barrier")  # entered, never completed: the hang's pending one
    deadline = time.monotonic() + 5
    while not w.batches and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [r["ph"] for r in w.records()] == ["enter"]
    assert tracer._flusher.name == "trainwreck-trace" and tracer._flusher.daemon


def test_settle_at_exit_sends_what_is_buffered(slow_timer):
    w = Batches()
    tracer = collectives.Tracer(w, 0, lambda: 0)
    traced(tracer, 2)
    tracer.settle(grace_s=0)
    assert len(w.records()) == 4


class Completed:
    """A work nobody waits on from Python (a DDP bucket's), already complete."""

    def is_completed(self) -> bool:
        return True


def test_an_optimizer_step_notes_completions_and_leaves_the_sending_to_the_batches(slow_timer, tmp_path):
    rec = instrument.Recorder(tmp_path / "run", 0, "k" * 32, 0)
    w = Batches()
    rec.tracer = collectives.Tracer(w, 0, lambda: rec.step)
    rec.tracer.plain_wait = lambda work: None
    rec.tracer.track(rec.tracer.issue("all_reduce", (torch.ones(4),), {}, True, "allreduce_"), Completed())
    rec.on_step(None)
    assert w.batches == []  # nothing signed at the step: between torch's kernels that is what costs
    assert [r["ph"] for r in rec.tracer._buf] == ["enter", "exit"]  # its completion seen at the step
    rec.tracer.flush()
    assert [[r["ph"] for r in b] for b in w.batches] == [["enter", "exit"]]


def test_a_forked_child_starts_with_an_empty_buffer_of_its_own(slow_timer):
    """A DataLoader worker is a fork: the parent's buffered records are the parent's to send."""
    w = Batches()
    tracer = collectives.Tracer(w, 0, lambda: 0)
    traced(tracer, 1)  # buffered, and the flusher thread started
    assert tracer._flusher is not None
    pid = os.fork()
    if pid == 0:  # the child: report through the exit code, never return into pytest
        ok = tracer._buf == [] and tracer._flusher is None and tracer._pid == os.getpid()
        traced(tracer, 1)
        tracer.flush()
        mine = [r["seq"] for r in w.records()]
        ok = ok and mine == [2, 2] and tracer._flusher is not threading.current_thread()
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    tracer.flush()
    assert [r["seq"] for r in w.records()] == [1, 1]  # the parent's, sent once, by the parent


# -- the caller lookup -------------------------------------------------------------------------

def _as_c10d(name: str):
    """A function whose code looks like torch.distributed's ``name``: it calls its argument."""
    ns: dict = {}
    exec(compile(f"def {name}(f):\n    return f()\n", collectives._C10D, "exec"), ns)
    return ns[name]


def test_the_caller_is_the_script_line_through_torch_frames_and_each_code_is_classified_once():
    all_reduce = _as_c10d("all_reduce")
    look = lambda: collectives._caller(sys._getframe(1))  # noqa: E731 - the kernel's view: from all_reduce's frame
    first = all_reduce(look)
    line = sys._getframe().f_lineno
    second = all_reduce(look)  # the same code objects, another line of the script
    here = Path(__file__).resolve()
    assert first == (f"{here}:{line - 1}", "all_reduce", None)
    assert second == (f"{here}:{line + 1}", "all_reduce", None)
    assert collectives._CODES[id(all_reduce.__code__)] == (False, "all_reduce", ())
    me = sys._getframe().f_code
    assert collectives._CODES[id(me)][0] is True  # this file is the script here
    cached = dict(collectives._CODES)
    all_reduce(look)
    assert collectives._CODES == cached  # nothing classified again
    assert all(any(c is code for code in collectives._KEPT) for c in (all_reduce.__code__, me))  # ids not reused


def test_dtype_names_are_what_str_gives_without_the_module():
    shapes, dtype = collectives._describe((torch.ones(2, 3, dtype=torch.bfloat16),))
    assert (shapes, dtype) == ([[2, 3]], "bfloat16")
    assert collectives._DTYPES[torch.bfloat16] == "bfloat16"


def test_a_step_record_is_on_disk_when_the_step_hook_returns(tmp_path):
    """The parent timestamps each step record as it arrives: that receive time is the step-time
    evidence the grader trusts (step_time_tail), so a step record may not wait in a buffer."""
    rec = instrument.Recorder(tmp_path / "run", 0, "k" * 32, 0)
    for n in (1, 2):
        rec.on_step(None)
        lines = (rec.dir / "events.jsonl").read_text().splitlines()
        assert [json.loads(line)["step"] for line in lines] == list(range(1, n + 1))


@pytest.mark.parametrize("name, args, shapes", [
    ("allreduce_", lambda t, o: ([t], o, o, None, True, -1), [[[3, 2]]]),
    ("allgather_", lambda t, o: ([[t, t]], [t], o, True, -1), [[[3, 2], [3, 2]], [[3, 2]]]),
    ("_allgather_base_", lambda t, o: (t, t[:1], o, True, -1), [[3, 2], [1, 2]]),
    ("barrier", lambda t, o: (t, o, [], True, -1), [[3, 2]]),
    ("send", lambda t, o: ([t], o, 1, 0), [[[3, 2]]]),
])
def test_the_tensor_arguments_the_schema_names_describe_a_call_as_all_of_them_do(name, args, shapes):
    # The kernel describes only the arguments the schema types as tensors (a TorchScript object's
    # isinstance is slow): the same shapes and dtype as looking at every argument.
    opov = getattr(torch.ops.c10d, name).default
    t = torch.zeros(3, 2, dtype=torch.bfloat16)
    call = args(t, object())
    at = collectives.data_positions(opov)
    assert collectives._describe([call[i] for i in at]) == collectives._describe(call) == (shapes, "bfloat16")
