"""What a rank's main thread is doing, as the parent reads it from /proc: real processes blocked in
the ways a straggler is (sleeping, reading a pipe, waiting on a lock), and a made-up /proc for the
states a test cannot put a process in (uninterruptible I/O, an unreadable syscall file)."""

from __future__ import annotations

import platform
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import threadstate
from harness.threadstate import FUTEX

BLOCKED = {
    "sleep": "import time; print('ready', flush=True); time.sleep(60)",
    "read": "import os; r, w = os.pipe(); print('ready', flush=True); os.read(r, 1)",
    "lock": "import threading; l = threading.Lock(); l.acquire(); print('ready', flush=True); l.acquire()",
}


@pytest.fixture
def blocked():
    procs = []

    def start(how: str) -> int:
        p = subprocess.Popen([sys.executable, "-c", BLOCKED[how]], stdout=subprocess.PIPE, text=True)
        procs.append(p)
        assert p.stdout.readline().strip() == "ready"
        # from "ready" to the blocking call is one line: wait until the kernel shows it blocked
        deadline = time.time() + 10  # generous: the machine's other jobs may hold the cores
        while time.time() < deadline:
            st = threadstate.read(p.pid)
            if st is not None and st.state != "R":
                break
            time.sleep(0.02)
        return p.pid

    yield start
    for p in procs:
        p.kill()
        p.wait()


@pytest.mark.skipif(platform.machine() not in ("x86_64", "aarch64"), reason="system call numbers known for these")
@pytest.mark.parametrize("how, doing, outside", [
    ("sleep", "sleeping", True),
    ("read", "reading a pipe", True),
    ("lock", FUTEX, False),  # a collective's wait reads the same: the trace tells them apart
])
def test_a_blocked_main_thread(blocked, how, doing, outside):
    st = threadstate.read(blocked(how))
    assert st is not None and st.state == "S"
    assert st.describe() == doing and st.outside is outside


def test_a_process_that_is_gone_reads_none():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    assert threadstate.read(p.pid) is None


def fake_proc(tmp_path: Path, pid: int, state: str, syscall: str | None, wchan: str = "0", fds: dict | None = None) -> str:
    task = tmp_path / str(pid) / "task" / str(pid)
    task.mkdir(parents=True)
    (task / "stat").write_text(f"{pid} (py) thon) {state} 1 1 1 0 -1\n")  # a name with ") " in it
    (task / "wchan").write_text(wchan)
    if syscall is not None:
        (task / "syscall").write_text(syscall + "\n")
    fd_dir = tmp_path / str(pid) / "fd"
    fd_dir.mkdir()
    for fd, target in (fds or {}).items():
        (fd_dir / str(fd)).symlink_to(target)
    return str(tmp_path)


@pytest.mark.parametrize("state, syscall, wchan, fds, doing, outside", [
    ("D", "0 0x3 0x7f 0x1000", "nfs_wait_bit_killable", {3: "/mnt/nfs/shard-0003.bin"},
     "in uninterruptible I/O (state D: disk or network filesystem)", True),
    ("R", "running", "0", {}, "running", False),
    ("S", None, "do_epoll_wait", {}, "blocked (do_epoll_wait)", False),  # syscall unreadable (no ptrace access)
    ("S", "999 0x0", "0", {}, "in system call 999", False),
])
def test_states_from_a_made_up_proc(tmp_path, state, syscall, wchan, fds, doing, outside):
    st = threadstate.read(4242, proc=fake_proc(tmp_path, 4242, state, syscall, wchan, fds))
    assert st.describe() == doing and st.outside is outside and st.state == state


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86_64 system call numbers")
@pytest.mark.parametrize("target, says", [
    ("/data/shard-\x1b[31m.bin", "reading /data/shard-?[31m.bin"),  # the script's text: printable only
    ("socket:[123]", "reading a socket"),
])
def test_what_a_read_is_reading(tmp_path, target, says):
    st = threadstate.read(7, proc=fake_proc(tmp_path, 7, "S", "0 0x5 0x7f 0x1000", "0", {5: target}))
    assert st.describe() == says
