"""Measuring a sandboxed run's processes from outside: which process is which rank, and what each
uses, read by the parent from ``/proc`` (psutil), never reported by code in the rank.

Inside, the run has its own PID namespace; outside, the parent sees its real pids. The tree is
fixed by the sandbox (``harness.sandbox``) and the kernel keeps its links (ppid, the namespace
pids in ``/proc/<pid>/status``), none of which the candidate can write::

    bwrap (our child) ─ bwrap init (NSpid 1) ─ launcher (NSpid 2) ─ rank processes ─ their children
                                           └─ anything else: a process that left the launcher's
                                              tree (a double-forked daemon): a stray

A rank is a child of the launcher; which rank it is comes from ``RANK`` and
``TORCHELASTIC_RESTART_COUNT`` in the environment the launcher started it with, read once, the
first time the parent sees the process (the bootstrap connects to the channel before the script
runs, and that connection is when the parent looks), and kept by (pid, start time): a script
that later rewrites its own environment block changes nothing here.
"""

from __future__ import annotations

import functools
import os
import signal
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

import psutil

MB = 2**20


@dataclass(frozen=True)
class RankProc:
    rank: int
    attempt: int
    local_rank: int
    pid: int  # outside
    ns_pid: int  # inside the sandbox
    started: float  # start time in clock ticks since boot (with pid: the process, never a reused pid)


@dataclass(frozen=True)
class ProcSample:
    """One outside look at a rank: its own process, and the tree under it (DataLoader workers)."""

    rank: int
    attempt: int
    pid: int
    t: float
    rss_mb: float
    tree_rss_mb: float  # every process's RSS summed: a forked worker's pages still shared with the rank count twice
    cpu_s: float  # user + system of every thread, plus children it has reaped
    tree_cpu_s: float
    threads: int
    procs: int  # the rank and its live descendants
    # the rank's RSS plus its descendants' private memory (USS): what the tree holds, each page once
    # however many forked workers still share it (None: not measured at this look)
    tree_mb: float | None = None
    gen: int = 0  # the tree's generation: one more each time the set of descendants changed
    # bytes sent over loopback in the run's own network namespace since it was made (kernel-counted;
    # the ranks' collectives on gloo and their rendezvous store): None where the rank shares the
    # parent's namespace (an unisolated run: the host's whole loopback traffic would be counted)
    net_tx: int | None = None

    def to_json(self) -> dict:
        out = {"a": self.attempt, "t": round(self.t, 3), "pid": self.pid,
               "rss_mb": round(self.rss_mb, 2), "tree_rss_mb": round(self.tree_rss_mb, 2),
               "cpu_s": round(self.cpu_s, 3), "tree_cpu_s": round(self.tree_cpu_s, 3),
               "threads": self.threads, "procs": self.procs, "gen": self.gen}
        if self.tree_mb is not None:
            out["tree_mb"] = round(self.tree_mb, 2)
        if self.net_tx is not None:
            out["net_tx"] = self.net_tx
        return out


@dataclass
class _Scan:
    members: dict[int, tuple[int, float]] = field(default_factory=dict)  # pid -> (ppid, start ticks)
    children: dict[int, list[int]] = field(default_factory=lambda: defaultdict(list))
    init: int | None = None
    launcher: int | None = None


def ns_pids(pid: int) -> list[int]:
    """The pid in each PID namespace from ours inwards (``NSpid``), empty when gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return [int(x) for x in line.split()[1:]]
    except OSError:
        pass
    return []


def cmdline(pid: int) -> str:
    """A process's command line for a report: candidate text, so printable ASCII only, short."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read(400)
    except OSError:
        return ""
    text = raw.replace(b"\0", b" ").decode("ascii", errors="replace")
    return "".join(ch if 32 <= ord(ch) < 127 else "?" for ch in text).strip()[:200]


class ProcWatch:
    def __init__(self, root_pid: int):
        """``root_pid``: the bwrap process the parent started (outside the sandbox)."""
        self.root_pid = root_pid
        self._lock = threading.Lock()
        self._scan = _Scan()
        self._ranks: dict[tuple[int, float], RankProc] = {}  # identified ranks, by (pid, start time)
        self.duplicates: list[RankProc] = []  # a second live process claiming a rank and attempt
        self._trees: dict[int, tuple[frozenset, int]] = {}  # rank pid -> (its descendants, generation)

    # -- the tree --------------------------------------------------------------------------
    def refresh(self) -> None:
        """One scan of the process table: the sandbox's processes and who is who."""
        children: dict[int, list[tuple[int, float]]] = defaultdict(list)
        for pid, ppid, started in _proc_table():
            children[ppid].append((pid, started))
        scan = _Scan()
        stack = [self.root_pid]
        while stack:
            parent = stack.pop()
            for pid, created in children.get(parent, ()):
                if pid in scan.members:
                    continue
                scan.members[pid] = (parent, created)
                scan.children[parent].append(pid)
                stack.append(pid)
        # Only bwrap's own child can be the sandbox's init, and only the init's child with pid 2
        # in the same namespace the launcher: a namespace the script makes inside has its own
        # pid 1 and 2, one level deeper.
        for pid in scan.children.get(self.root_pid, ()):
            nsp = ns_pids(pid)
            if len(nsp) >= 2 and nsp[-1] == 1:
                scan.init = pid
                for child in scan.children.get(pid, ()):
                    if ns_pids(child)[-1:] == [2] and len(ns_pids(child)) == len(nsp):
                        scan.launcher = child
        with self._lock:
            self._scan = scan
            for pid in scan.children.get(scan.launcher, ()) if scan.launcher else ():
                self._identify_child(pid, scan.members[pid][1])

    def _identify_child(self, pid: int, created: float) -> RankProc | None:
        key = (pid, created)
        if key in self._ranks:
            return self._ranks[key]
        info = None
        try:
            env = psutil.Process(pid).environ()
            if "RANK" in env:
                info = RankProc(rank=int(env["RANK"]), attempt=int(env.get("TORCHELASTIC_RESTART_COUNT", "0")),
                                local_rank=int(env.get("LOCAL_RANK", env["RANK"])), pid=pid,
                                ns_pid=(ns_pids(pid) or [0])[-1], started=created)
        except (psutil.Error, ValueError):
            info = None
        if info is None:
            # Not cached: between its fork and its exec a rank still has the launcher's environment,
            # without RANK (a scan in that instant once left rank 1 unidentified for the whole run).
            return None
        for other in self._live_ranks():
            if (other.rank, other.attempt) == (info.rank, info.attempt) and other.pid != pid:
                self.duplicates.append(info)
        self._ranks[key] = info
        return info

    def _live_ranks(self) -> list[RankProc]:
        live = self._scan.members
        return [r for (pid, created), r in self._ranks.items()
                if r is not None and live.get(pid, (0, None))[1] == created]

    @property
    def launcher(self) -> int | None:
        return self._scan.launcher

    def ranks(self) -> list[RankProc]:
        """Live rank processes, by rank."""
        with self._lock:
            return sorted(self._live_ranks(), key=lambda r: (r.rank, r.attempt))

    def members(self) -> list[int]:
        """Every live process of the sandbox, bwrap's own two included."""
        return [self.root_pid, *self._scan.members]

    def identify(self, pid: int) -> RankProc | None:
        """The rank whose process is ``pid`` or an ancestor of it (a DataLoader worker belongs to
        its rank); None for anything else (the launcher, a stray, a process outside).

        Always from a fresh scan (a few ms; the channel asks once per connection): a pid known from
        an earlier one may have been re-parented since. A daemon that double-forked out of a rank,
        scanned while its middle process still lived, passed as that rank when it connected after
        the re-parenting (seen in CI: the hostile channel test's daemon was neither refused nor a
        stray)."""
        self.refresh()
        with self._lock:
            scan = self._scan
            seen = 0
            while pid in scan.members and seen < 64:
                ppid, created = scan.members[pid]
                if ppid == scan.launcher:
                    return self._identify_child(pid, created)
                pid, seen = ppid, seen + 1
        return None

    def strays(self) -> list[int]:
        """Processes in the sandbox outside the launcher's tree: re-parented to the sandbox's init
        after their parent exited (a daemon that double-forked, or a rank's orphaned worker)."""
        with self._lock:
            scan = self._scan
            if scan.init is None:
                return []
            out, stack = [], [p for p in scan.children.get(scan.init, ()) if p != scan.launcher]
            while stack:
                pid = stack.pop()
                out.append(pid)
                stack += scan.children.get(pid, ())
            return out

    def subtree(self, pid: int) -> list[int]:
        with self._lock:
            out, stack = [], [pid]
            while stack:
                p = stack.pop()
                out.append(p)
                stack += self._scan.children.get(p, ())
            return out

    # -- measurements ----------------------------------------------------------------------
    def sample(self, tree_memory: bool = False) -> list[ProcSample]:
        """Memory, CPU time, threads and processes of every live rank, from /proc; with
        ``tree_memory`` also ``tree_mb``, the memory the tree holds (the rank's RSS plus each
        descendant's USS: one ``smaps_rollup`` read per descendant, some 6 ms for a forked torch
        worker, so only at the looks that are written, and only for ranks that have descendants)."""
        now = time.time()
        out = []
        ranks = self.ranks()
        net = loopback_tx(ranks[0].pid) if ranks else None
        for r in ranks:
            tree = self.subtree(r.pid)
            rss = cpu = tree_rss = tree_cpu = 0.0
            uss: float | None = 0.0 if tree_memory else None
            threads, procs = 0, 0
            alive: list[tuple[int, float]] = []
            for i, pid in enumerate(tree):
                try:
                    p = psutil.Process(pid)
                    with p.oneshot():
                        if p.status() == psutil.STATUS_ZOMBIE:
                            # exited, not yet reaped: nothing left to measure (a rank read so
                            # once wrote a sample of 0 MB after its last step)
                            if i == 0:
                                break
                            continue
                        m = p.memory_info().rss / MB
                        c = p.cpu_times()
                        n = p.num_threads()
                        if i and uss is not None:
                            uss += p.memory_full_info().uss / MB
                        started = p.create_time()
                except psutil.Error:  # exited between the scan and now
                    continue
                own = c.user + c.system + c.children_user + c.children_system
                if i == 0:
                    rss, cpu, threads = m, own, n
                else:
                    alive.append((pid, started))
                tree_rss += m
                tree_cpu += own
                procs += 1
            if procs:
                out.append(ProcSample(r.rank, r.attempt, r.pid, now, rss, tree_rss, cpu, tree_cpu,
                                      threads, procs, None if uss is None else rss + uss,
                                      self._generation(r.pid, frozenset(alive)), net))
        return out

    def _generation(self, rank_pid: int, descendants: frozenset) -> int:
        """The tree's generation: 0 for the descendants first seen, one more at each look that finds
        another set (a DataLoader's workers started, or ended)."""
        seen = self._trees.get(rank_pid)
        if seen is None:
            gen = 0
        else:
            gen = seen[1] + (seen[0] != descendants)
        self._trees[rank_pid] = (descendants, gen)
        return gen

    # -- ending processes ------------------------------------------------------------------
    def kill(self, pids: list[int]) -> list[int]:
        """SIGKILL each pid still in the sandbox; returns those signalled. Only pids of this
        sandbox are touched, so a pid reused outside is never hit."""
        with self._lock:
            mine = {p: c for p, (_, c) in self._scan.members.items()}
        done = []
        for pid in pids:
            try:
                if pid in mine and _stat(pid)[1] == mine[pid]:
                    os.kill(pid, signal.SIGKILL)
                    done.append(pid)
            except (OSError, ValueError, IndexError):
                continue
        return done


@functools.cache
def _own_netns() -> str:
    """The parent's network namespace: it never changes, and every poll asks."""
    return os.readlink("/proc/self/ns/net")


def loopback_tx(pid: int) -> int | None:
    """Bytes sent on ``lo`` in the network namespace of ``pid`` (``/proc/<pid>/net/dev``), or None
    when that namespace is ours or cannot be read. Both ranks' traffic to each other crosses it once."""
    try:
        if os.readlink(f"/proc/{pid}/ns/net") == _own_netns():
            return None
        with open(f"/proc/{pid}/net/dev") as f:
            for line in f:
                name, _, counters = line.partition(":")
                if name.strip() == "lo":
                    return int(counters.split()[8])  # receive has 8 fields; transmit bytes is the 9th
    except (OSError, ValueError, IndexError):
        pass
    return None


def _stat(pid: int) -> tuple[int, float]:
    """(ppid, start time in clock ticks since boot) from /proc/<pid>/stat: kernel-written. The
    command name in it is the process's own choice, so fields are counted after its last ')'."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return int(fields[1]), float(fields[19])


def _proc_table() -> list[tuple[int, int, float]]:
    """(pid, ppid, start ticks) of every process: one small read each, a few ms for hundreds
    (psutil's process_iter costs ten times that, most of it pid-reuse checks we do ourselves)."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                ppid, started = _stat(int(name))
            except (OSError, ValueError, IndexError):
                continue
            out.append((int(name), ppid, started))
    return out
