"""What a rank's main thread is doing, read by the parent from ``/proc``: the cross-check of the
collective trace when a job stops making progress.

The trace says whether a rank's last collective was entered and never completed; it cannot say
whether the rank is waiting in it. An operator issued with ``async_op`` (DDP's bucket
all-reduces are) stays open while the rank does other things, and a collective the trace does not
see (one that bypasses ``ProcessGroup``) leaves none open. So the parent reads the main thread's
state (``stat``), its system call (``syscall``) and where the kernel put it to sleep (``wchan``):

- a rank blocked in a gloo collective waits on a condition variable: ``futex`` (measured here: a
  rank-0-only ``barrier`` and a DDP bucket all-reduce both read syscall 202, wchan
  ``futex_do_wait``);
- ``time.sleep`` reads ``clock_nanosleep``; a blocking read of a socket, a pipe or a file reads
  ``read``/``recvfrom`` (or ``poll``/``select`` when it has a timeout), a write to a slow store
  ``write``/``sendto``; a network filesystem that stalls leaves the thread in state ``D``.

Only the first can be a collective; the others are a rank outside any collective, doing that. A
``futex`` outside a collective (a lock, a queue, a thread's join) is told apart by the trace.
The main thread is the process's first thread (tid = pid): the bootstrap runs the script there.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from typing import Any

# System call numbers by what they are, for the machines torch runs on (x86_64; aarch64 uses the
# generic table). Anything else reads as "in system call N".
_SYSCALLS = {
    "x86_64": {
        "sleeping": (35, 230),  # nanosleep, clock_nanosleep
        "waiting for a file descriptor (poll/select)": (7, 23, 232, 270, 271, 281, 441),
        "reading": (0, 17, 19, 45, 47, 295),  # read, pread64, readv, recvfrom, recvmsg, preadv
        "writing": (1, 18, 20, 40, 44, 46, 74, 75, 296, 326),  # ... sendfile, sendto, sendmsg, fsync
        "connecting": (42, 43, 288),
        "waiting for a child process": (61, 247),
        "waiting on a lock, a condition or a thread (futex)": (202,),
    },
    "aarch64": {
        "sleeping": (101, 115),
        "waiting for a file descriptor (poll/select)": (22, 72, 73, 441),
        "reading": (63, 65, 67, 69, 207, 212),
        "writing": (64, 66, 68, 70, 71, 82, 83, 206, 211, 285),
        "connecting": (202, 203, 242),
        "waiting for a child process": (95, 260),
        "waiting on a lock, a condition or a thread (futex)": (98,),
    },
}
_BY_NUMBER = {n: what for what, nums in _SYSCALLS.get(platform.machine(), {}).items() for n in nums}
FUTEX = "waiting on a lock, a condition or a thread (futex)"
# Doing these, a thread is not waiting in a collective, whatever the trace has open.
OUTSIDE = frozenset({"sleeping", "waiting for a file descriptor (poll/select)", "reading", "writing", "connecting",
                     "waiting for a child process", "in uninterruptible I/O (state D: disk or network filesystem)"})
_FD_FIRST = {"reading", "writing"}  # their first argument is the file descriptor


@dataclass(frozen=True)
class ThreadState:
    state: str  # the kernel's letter: R running, S sleeping, D uninterruptible, ...
    syscall: int | None  # the system call it is blocked in; None when running or unreadable
    wchan: str | None  # the kernel function it sleeps in
    doing: str  # in words: "sleeping", "reading", FUTEX, "running", ...
    target: str | None = None  # for a read or a write: the file, or "a socket", "a pipe"

    @property
    def outside(self) -> bool:
        """Certainly not waiting in a collective."""
        return self.doing in OUTSIDE

    def describe(self) -> str:
        return self.doing + (f" {self.target}" if self.target else "")

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "syscall": self.syscall, "wchan": self.wchan, "doing": self.describe()}


def read(pid: int, proc: str = "/proc") -> ThreadState | None:
    """The main thread's state, or None when the process is gone or cannot be read."""
    base = f"{proc}/{pid}/task/{pid}"
    try:
        with open(f"{base}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
    except OSError:
        return None
    # the command name is in parentheses and may hold anything: the state follows the last ")"
    state = stat[stat.rfind(")") + 2:][:1] or "?"
    wchan = _read(f"{base}/wchan")
    wchan = wchan if wchan and wchan != "0" else None
    fields = (_read(f"{base}/syscall") or "").split()  # needs ptrace access: may be unreadable
    number = int(fields[0]) if fields and fields[0].lstrip("-").isdigit() else None
    if state == "D":
        doing = "in uninterruptible I/O (state D: disk or network filesystem)"
    elif state == "R" or (fields[:1] == ["running"]):
        doing, number = "running", None
    elif number is not None and number >= 0:
        doing = _BY_NUMBER.get(number, f"in system call {number}")
    else:
        doing = f"blocked ({wchan})" if wchan else "blocked"
    target = None
    if doing in _FD_FIRST and len(fields) > 1:
        target = fd_target(pid, int(fields[1], 16), proc)
    return ThreadState(state=state, syscall=number, wchan=wchan, doing=doing, target=target)


def fd_target(pid: int, fd: int, proc: str = "/proc") -> str | None:
    """What a file descriptor is, for a report: a file's path (the script's text: printable ASCII,
    short), or "a socket", "a pipe"."""
    try:
        link = os.readlink(f"{proc}/{pid}/fd/{fd}")
    except (OSError, ValueError):
        return None
    if link.startswith("socket:"):
        return "a socket"
    if link.startswith("pipe:"):
        return "a pipe"
    if link.startswith("anon_inode:"):
        return None
    return "".join(ch if 32 <= ord(ch) < 127 else "?" for ch in link)[-160:]


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(512).decode(errors="replace").strip()
    except OSError:
        return None
