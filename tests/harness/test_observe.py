"""Reading faulthandler dumps: the blocked line is the user's innermost frame on the main thread."""

from harness.observe import parse_stacks, rate

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
