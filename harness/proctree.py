"""Tracking and ending a launch's whole process tree.

The elastic launcher starts each rank in a session of its own (``start_new_session=True``), so a
signal to the launcher's process group does not reach the ranks. We therefore remember every
descendant we have ever seen (pid + create time, which guards against pid reuse) and end them all.
A process that left the tree before we saw it (a daemonized helper, re-parented to init) is found
at the end by the environment every process of the launch inherits.
"""

from __future__ import annotations

import os
import signal
import time
from collections import defaultdict

import psutil


class ProcessTree:
    def __init__(self, root: int | psutil.Process, env_marker: tuple[str, str] | None = None):
        """``root``: a pid, or the ``psutil.Popen`` of our own child, whose exit code then survives
        the clean-up (psutil reaps a child it waits for; through its Popen the code is kept)."""
        self._seen: dict[int, float] = {}
        self._procs: dict[int, psutil.Process] = {}
        # (name, value) of an environment variable every process of the launch inherits: finds
        # the ones that left the tree (a script's daemonized helper, an orphaned worker).
        self._env_marker = env_marker
        if isinstance(root, psutil.Process):
            self._procs[root.pid] = root
            root = root.pid
        self.add(root)

    def add(self, pid: int) -> None:
        try:
            self._seen.setdefault(pid, psutil.Process(pid).create_time())
        except psutil.Error:
            pass

    def refresh(self) -> None:
        """Add the descendants of every process seen so far, from one scan of the process table
        (this runs on every poll, on a machine whose cores the ranks are using)."""
        children: dict[int, list[tuple[int, float]]] = defaultdict(list)
        current: dict[int, float] = {}
        for p in psutil.process_iter(["ppid", "create_time"]):
            current[p.pid] = p.info["create_time"]
            if p.info["ppid"] is not None:
                children[p.info["ppid"]].append((p.pid, p.info["create_time"]))
        # Expand only from processes that are still the ones we saw (a reused pid is not ours).
        stack = [pid for pid, created in self._seen.items() if current.get(pid) == created]
        while stack:
            for pid, created in children.get(stack.pop(), ()):
                if pid not in self._seen and created is not None:
                    self._seen[pid] = created
                    stack.append(pid)

    def adopt_strays(self) -> None:
        """Add every process carrying the launch's environment marker, wherever it was reparented."""
        if self._env_marker is None:
            return
        name, value = self._env_marker
        me = os.getpid()
        for p in psutil.process_iter():
            try:
                if p.pid != me and p.environ().get(name) == value:
                    self._seen.setdefault(p.pid, p.create_time())
            except psutil.Error:  # gone, a zombie, or not ours to read
                continue

    def alive(self) -> list[psutil.Process]:
        out = []
        for pid, created in self._seen.items():
            try:
                p = self._procs.get(pid) or psutil.Process(pid)
                if p.create_time() == created and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p)
            except psutil.Error:
                continue
        return out

    def signal_all(self, sig: int) -> None:
        for p in self.alive():
            try:
                p.send_signal(sig)
            except psutil.Error:
                pass

    def terminate(self, grace_s: float = 3.0) -> None:
        """SIGTERM everything, wait up to ``grace_s``, then SIGKILL whatever is left."""
        self.refresh()
        self.adopt_strays()
        procs = self.alive()
        for p in procs:
            try:
                p.send_signal(signal.SIGTERM)
            except psutil.Error:
                pass
        _, left = psutil.wait_procs(procs, timeout=grace_s)
        for p in left:
            try:
                p.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(left, timeout=5)
        deadline = time.time() + 5
        while time.time() < deadline:
            self.refresh()  # a dying parent may have started a child meanwhile
            self.adopt_strays()
            stragglers = self.alive()
            if not stragglers:
                break
            for p in stragglers:
                try:
                    p.kill()
                except psutil.Error:
                    pass
            time.sleep(0.1)
