"""CPU time read from /proc by the parent: a computing process (or one whose child computes) is
working, a sleeping one is not. The figures for a rank blocked in a gloo collective are measured
by the hang tests (test_launch.py), which assert that such ranks read below the threshold."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from harness.liveness import BUSY_FRACTION, CpuWatch

SPIN = "import time\nt = time.time()\nwhile time.time() - t < 30: pass\n"
SLEEP = "import time\ntime.sleep(30)\n"
# A parent that only waits while its child computes (a DataLoader worker doing the work).
PARENT = f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {SPIN!r}])\n"


@pytest.mark.parametrize("code, working", [(SPIN, True), (SLEEP, False), (PARENT, True)])
@pytest.mark.slow
def test_cpu_watch_tells_working_from_waiting(code, working):
    p = subprocess.Popen([sys.executable, "-c", code])
    try:
        watch = CpuWatch(sample_s=0.0)
        time.sleep(0.5)  # the interpreter's own start-up CPU is not what is measured
        t = time.time()
        assert watch.sample({0: p.pid}, t) == {}  # the first reading only sets the baseline
        time.sleep(1.5)
        frac = watch.sample({0: p.pid}, time.time())[0]
        assert (frac >= BUSY_FRACTION) is working, frac
    finally:
        kids = _children_of(p.pid)
        p.kill()
        p.wait()
        for child in kids:
            child.kill()


def test_cpu_watch_samples_at_most_every_sample_s():
    watch = CpuWatch(sample_s=1.0)
    assert watch.sample({0: subprocess.os.getpid()}, 100.0) == {}
    assert watch.sample({0: subprocess.os.getpid()}, 100.5) == {}  # too soon: not read
    assert set(watch.sample({0: subprocess.os.getpid()}, 101.0)) == {0}


def test_a_rank_that_is_gone_reads_nothing():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    assert CpuWatch(sample_s=0.0).sample({0: p.pid}, time.time()) == {}


def _children_of(pid):
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []
