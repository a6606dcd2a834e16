"""The outside sampler: which sandboxed process is which rank, from the kernel's view of the tree
and the environment each rank was started with, never from what the processes later say; and
what each uses, read from /proc by the parent."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from harness import procwatch, sandbox
from harness.proctree import ProcessTree
from harness.procwatch import ProcWatch
from tests.conftest import FIXTURES, REPO, assert_nothing_left

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not sandbox.probe().ok, reason="no sandbox here")]


class Trees:
    """Start fake_launcher.py in a sandbox; (watch, work dir) once it is ready."""

    def __init__(self, tmp_path: Path):
        self.tmp_path = tmp_path
        self.started: list[psutil.Popen] = []

    def __call__(self, *args: str) -> tuple[ProcWatch, Path]:
        work = self.tmp_path / f"work{len(self.started)}"
        sandbox.prepare_writable(work, sandbox.SANDBOX_UID if os.geteuid() == 0 else None)
        w = sandbox.build(sandbox.SandboxPolicy(kit_root=REPO, readable=[FIXTURES], writable=[work]),
                          [sys.executable, str(FIXTURES / "hostile" / "fake_launcher.py"), *args])
        proc = psutil.Popen(w.argv, env=w.env, start_new_session=True)
        self.started.append(proc)
        deadline = time.time() + 60
        while not (work / "ready").exists() and time.time() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert (work / "ready").exists(), "the fake launcher never got ready"
        watch = ProcWatch(proc.pid)
        watch.refresh()
        return watch, work

    def end(self) -> None:
        for proc in self.started:
            ProcessTree(proc).terminate(grace_s=0.5)
        assert_nothing_left(self.tmp_path)


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One tree for the tests that only look at it (each start costs seconds of CPU)."""
    trees = Trees(tmp_path_factory.mktemp("procwatch"))
    yield trees()
    trees.end()


@pytest.fixture
def tree(tmp_path):
    trees = Trees(tmp_path)
    yield trees
    trees.end()


def workers(work: Path) -> dict[int, int]:
    """rank process pid (inside) -> its worker's pid (inside)."""
    return {int(p.name.split("-")[1]): int(p.read_text()) for p in work.glob("worker-*")}


def outside(watch: ProcWatch, ns_pid: int) -> int:
    return next(p for p in watch.members() if procwatch.ns_pids(p)[-1:] == [ns_pid])


def test_ranks_are_the_launchers_children_by_the_environment_they_started_with(shared):
    watch, work = shared
    ranks = watch.ranks()
    assert [r.rank for r in ranks] == [0, 1] and all(r.attempt == 0 for r in ranks)
    assert procwatch.ns_pids(watch.launcher)[-1] == 2
    for r in ranks:
        assert psutil.Process(r.pid).ppid() == watch.launcher
        assert procwatch.ns_pids(r.pid)[-1] == r.ns_pid != r.pid


def test_a_worker_belongs_to_its_rank_whatever_its_environment_says(shared):
    watch, work = shared
    by_ns = {r.ns_pid: r.rank for r in watch.ranks()}
    for rank_ns, worker_ns in workers(work).items():
        peer = watch.identify(outside(watch, worker_ns))
        assert peer is not None and peer.rank == by_ns[rank_ns]  # its env says RANK=1 for both


@pytest.mark.parametrize("who", ["launcher", "daemon", "outside", "bwrap"])
def test_what_is_no_rank_is_identified_as_none(shared, who):
    watch, work = shared
    pid = {"launcher": watch.launcher, "daemon": (watch.strays() or [0])[0], "outside": os.getpid(),
           "bwrap": watch.root_pid}[who]
    assert pid and watch.identify(pid) is None


def test_the_daemon_is_a_stray_and_only_it(shared):
    watch, work = shared
    strays = watch.strays()
    assert len(strays) == 1 and psutil.Process(strays[0]).cmdline() == ["/bin/sleep", "600"]


def test_samples_come_from_proc(shared):
    watch, work = shared
    by_rank = {s.rank: s for s in watch.sample()}
    assert by_rank[0].rss_mb > 200 > by_rank[1].rss_mb > 40
    assert by_rank[0].procs == 2 and by_rank[0].tree_rss_mb > by_rank[0].rss_mb  # rank + worker
    assert all(s.cpu_s > 0.5 and s.threads >= 1 for s in by_rank.values())


def test_the_trees_memory_counts_pages_a_forked_worker_shares_once(tree):
    """Rank 0 holds 200 MB and forks a child that shares them (as a DataLoader worker starts out):
    its RSS shows them again (tree_rss_mb), its private memory does not (tree_mb). The tree's
    generation moves when its set of processes changes, and only then."""
    watch, work = tree("--fork")
    first = {s.rank: s for s in watch.sample(tree_memory=True)}
    s0 = first[0]
    assert s0.procs == 3 and s0.tree_rss_mb > s0.rss_mb + 150  # the forked child's RSS: the rank's pages again
    assert s0.rss_mb <= s0.tree_mb < s0.rss_mb + 60, s0
    assert {s.rank: s.tree_mb for s in watch.sample()} == {0: None, 1: None}  # measured only when asked
    assert {s.gen for s in watch.sample(tree_memory=True)} == {0}
    forked = {int(p.name.split("-")[1]): int(p.read_text()) for p in work.glob("forked-*")}
    rank0_ns = next(r.ns_pid for r in watch.ranks() if r.rank == 0)
    pid = outside(watch, forked[rank0_ns])
    assert watch.kill([pid]) == [pid]
    deadline = time.time() + 5
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE and time.time() < deadline:
        time.sleep(0.05)  # the rank never reaps it: a zombie, no longer measured
    watch.refresh()
    after = {s.rank: s for s in watch.sample(tree_memory=True)}
    assert after[0].procs == 2 and after[0].gen == 1 and after[1].gen == 0


def test_a_second_process_claiming_a_rank_is_flagged(tree):
    watch, work = tree("--dup")
    assert len(watch.duplicates) == 1 and watch.duplicates[0].rank == 0


def test_kill_never_touches_a_process_outside_the_sandbox(tree):
    watch, work = tree()
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert watch.kill([bystander.pid, os.getpid()]) == []
        assert bystander.poll() is None
        daemon = watch.strays()
        assert watch.kill(daemon) == daemon
        try:
            psutil.Process(daemon[0]).wait(timeout=5)
        except psutil.NoSuchProcess:  # ended and reaped before the look (seen once on a loaded machine)
            pass
    finally:
        bystander.kill()
        bystander.wait()


@pytest.mark.parametrize("raw, shown", [
    (b"python\0train.py\0", "python train.py"),
    (b"evil\0\x1b[2J\x07\0", "evil ?[2J?"),
    (b"x" * 500, "x" * 200),
])
def test_cmdline_is_printable_and_short(tmp_path, monkeypatch, raw, shown):
    fake = tmp_path / "cmdline"
    fake.write_bytes(raw)
    real_open = open
    monkeypatch.setattr("builtins.open", lambda p, *a, **k: real_open(fake if str(p).endswith("/cmdline") else p, *a, **k))
    assert procwatch.cmdline(1) == shown


def test_ns_pids_outside_any_sandbox():
    assert procwatch.ns_pids(os.getpid()) == [os.getpid()]
    assert procwatch.ns_pids(2**22 + 7) == []
