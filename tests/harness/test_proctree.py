"""Ending a launch's whole process tree: descendants, processes that left it, and ones that
ignore SIGTERM. Plain shell processes, no torch."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from harness.proctree import ProcessTree

pytestmark = pytest.mark.slow  # starts processes of its own (seconds each)


def wait_for(cond, timeout=10.0):
    deadline = time.time() + timeout
    while not cond() and time.time() < deadline:
        time.sleep(0.05)
    return cond()


def test_descendants_are_found_and_ended(tmp_path):
    root = subprocess.Popen(["bash", "-c", "sleep 60 & (sleep 60 & wait) & wait"], start_new_session=True)
    tree = ProcessTree(root.pid)
    assert wait_for(lambda: (tree.refresh(), len(tree.alive()))[1] == 4)  # bash, sleep, subshell, its sleep
    pids = [p.pid for p in tree.alive()]
    tree.terminate(grace_s=2)
    root.wait(timeout=5)
    assert not [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]


def test_a_process_ignoring_sigterm_is_killed(tmp_path):
    root = psutil.Popen([sys.executable, "-c", "import signal, sys, time\n"
                             "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\ntime.sleep(60)"],
                            stdout=subprocess.PIPE, text=True)
    assert root.stdout.readline() == "ready\n"
    tree = ProcessTree(root)
    t = time.time()
    tree.terminate(grace_s=0.5)
    assert not tree.alive() and time.time() - t < 5
    assert root.poll() == -9  # and the exit code of our own child is still ours to read


def test_a_process_that_left_the_tree_is_found_by_its_environment(tmp_path):
    marker = ("TRAINWRECK_TEST_MARKER", str(tmp_path))
    env = {**os.environ, marker[0]: marker[1]}
    # The middle process exits at once: the sleeper is re-parented away before any refresh sees it.
    root = subprocess.Popen(["bash", "-c", "setsid sleep 60 & disown; exit 0"], env=env)
    root.wait()
    tree = ProcessTree(root.pid, env_marker=marker)
    tree.refresh()
    assert tree.alive() == []  # not reachable from the (gone) root

    def stray():
        return [p for p in psutil.process_iter() if p.pid != os.getpid() and _env(p).get(marker[0]) == marker[1]]

    assert wait_for(lambda: len(stray()) == 1)
    tree.terminate(grace_s=1)
    assert wait_for(lambda: not stray())


def _env(p):
    try:
        return p.environ()
    except psutil.Error:
        return {}
