"""Reading a run back: faulthandler dumps, tracebacks, step rates, and where each rank was last."""

import pytest

from harness import rundir
from harness.launch import display_path
from harness.observe import observe_rank, parse_stacks, raised_at, rate

KEY = "k" * 32

DUMP = '''Thread 0x00007f0000000002 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 320 in wait
  File "/x/site-packages/torch/utils/data/_utils/pin_memory.py", line 50 in _pin_memory_loop

Current thread 0x00007f0000000001 (most recent call first):
  File "/x/site-packages/torch/distributed/distributed_c10d.py", line 4159 in barrier
  File "/kit/harness/instrument.py", line 139 in traced
  File "/work/ex/train.py", line 72 in save_checkpoint
  File "/work/ex/train.py", line 128 in main
  File "<frozen runpy>", line 88 in _run_code
  File "/kit/harness/bootstrap.py", line 88 in _run_script
'''


def test_parse_stacks_finds_the_main_threads_user_frame():
    out = parse_stacks(DUMP)
    assert out["site"] == "/work/ex/train.py:72"
    assert out["frames"][0].endswith("in barrier")


def test_parse_stacks_of_nothing():
    assert parse_stacks("")["site"] is None


def test_rate_skips_warmup_steps():
    assert rate([0, 10, 11, 12, 13]) == 1.0  # the first two steps (start-up) do not count
    assert rate([0.0]) == 0.0


TRACEBACK = '''Traceback (most recent call last):
  File "/kit/harness/bootstrap.py", line 64, in main
    code = _run_script(script, args)
  File "<frozen runpy>", line 88, in _run_code
  File "/work/ex/train.py", line 40, in <module>
    main()
  File "/work/ex/train.py", line 31, in main
    dist.all_reduce(t)
  File "/kit/harness/instrument.py", line 157, in traced
    out = fn(*args, **kwargs)
  File "/x/site-packages/torch/distributed/distributed_c10d.py", line 3252, in all_reduce
    work.wait()
RuntimeError: Connection closed by peer
'''


@pytest.mark.parametrize("text, site", [
    (TRACEBACK, "/work/ex/train.py:31"),
    ('  File "/x/site-packages/torch/nn/modules/module.py", line 1, in f\nValueError: x\n', None),
    (None, None),
])
def test_raised_at_is_the_innermost_user_frame(text, site):
    assert raised_at(text) == site


def test_last_location_prefers_where_the_rank_raised(tmp_path):
    rdir = rundir.rank_dir(tmp_path, 0)
    ev = rundir.RecordWriter(rdir / rundir.EVENTS, KEY)
    col = rundir.RecordWriter(rdir / rundir.COLLECTIVES, KEY)
    col.write({"a": 0, "seq": 1, "op": "barrier", "ph": "enter", "site": "/work/ex/train.py:12"})
    col.write({"a": 0, "seq": 1, "ph": "exit"})
    assert observe_rank(tmp_path, 0, KEY).last_location == "/work/ex/train.py:12"  # last collective
    col.write({"a": 0, "seq": 2, "op": "all_reduce", "ph": "enter", "site": "/work/ex/train.py:31"})
    assert observe_rank(tmp_path, 0, KEY).last_location == "/work/ex/train.py:31"  # still inside it
    ev.write({"kind": "exit", "attempt": 0, "t": 1.0, "status": "exception", "code": 1,
              "error": TRACEBACK.replace("line 31", "line 33")})
    assert observe_rank(tmp_path, 0, KEY).last_location == "/work/ex/train.py:33"


@pytest.mark.parametrize("site, shown", [
    ("{cwd}/train.py:3", "train.py:3"),
    ("{cwd}/sub/train.py:3", "sub/train.py:3"),
    ("/elsewhere/train.py:3", "/elsewhere/train.py:3"),
    (None, None),
])
def test_display_path_is_relative_under_the_cwd(tmp_path, monkeypatch, site, shown):
    monkeypatch.chdir(tmp_path)
    assert display_path(site.format(cwd=tmp_path) if site else site) == shown


@pytest.mark.parametrize("exits, last_seq, location", [
    ([1, 2], 2, "/work/ex/train.py:32"),
    ([2, 1], 2, "/work/ex/train.py:32"),  # the bucket's completion seen after the later all_reduce returned
    ([1], 1, "/work/ex/train.py:32"),     # the later one never returned: the rank is in it
])
def test_the_last_collective_is_the_last_issued_whatever_order_they_are_seen_done_in(tmp_path, exits, last_seq,
                                                                                      location):
    """DDP's bucket all-reduce (issued in backward) is seen complete at the next look at the open works,
    which can come after the script's own later collective has returned."""
    col = rundir.RecordWriter(rundir.rank_dir(tmp_path, 0) / rundir.COLLECTIVES, KEY)
    col.write({"a": 0, "seq": 1, "op": "all_reduce", "ph": "enter", "site": "/work/ex/train.py:28", "by": "backward"})
    col.write({"a": 0, "seq": 2, "op": "all_reduce", "ph": "enter", "site": "/work/ex/train.py:32"})
    for seq in exits:
        col.write({"a": 0, "seq": seq, "ph": "exit"})
    obs = observe_rank(tmp_path, 0, KEY)
    assert obs.last_collective["seq"] == last_seq and obs.last_location == location
