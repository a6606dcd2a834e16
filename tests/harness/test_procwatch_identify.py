"""Which rank a connecting pid belongs to is read from the process tree as it is when it connects,
not as an earlier scan saw it (no sandbox needed: the process table is simulated)."""

from __future__ import annotations

import pytest

from harness import procwatch
from harness.procwatch import ProcWatch

BWRAP, INIT, LAUNCHER, RANK0, MIDDLE, DAEMON = 100, 101, 102, 103, 104, 105
NS = {INIT: [INIT, 1], LAUNCHER: [LAUNCHER, 2], RANK0: [RANK0, 3], MIDDLE: [MIDDLE, 4], DAEMON: [DAEMON, 5]}


class _Proc:
    def __init__(self, pid: int):
        self.pid = pid

    def environ(self) -> dict[str, str]:
        return {"RANK": "0", "LOCAL_RANK": "0"} if self.pid == RANK0 else {}


@pytest.fixture
def table(monkeypatch):
    rows = {INIT: BWRAP, LAUNCHER: INIT, RANK0: LAUNCHER, MIDDLE: RANK0, DAEMON: MIDDLE}
    monkeypatch.setattr(procwatch, "_proc_table", lambda: [(p, pp, 1.0) for p, pp in rows.items()])
    monkeypatch.setattr(procwatch, "ns_pids", lambda pid: NS.get(pid, [pid]))
    monkeypatch.setattr(procwatch.psutil, "Process", _Proc)
    return rows


def test_a_daemon_that_left_its_rank_after_a_scan_is_not_that_rank(table):
    watch = ProcWatch(BWRAP)
    watch.refresh()  # the middle process still lives: the daemon is under the rank
    assert watch.identify(DAEMON) is not None and watch.identify(DAEMON).rank == 0
    del table[MIDDLE]  # the middle exits; the daemon is re-parented to the sandbox's init
    table[DAEMON] = INIT
    assert watch.identify(DAEMON) is None
    assert watch.strays() == [DAEMON]
    assert watch.identify(RANK0).rank == 0
