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

import psutil


class ProcessTree:
    def __init__(self, root_pid: int, env_marker: tuple[str, str] | None = None):
        self._seen: dict[int, float] = {}
        # (name, value) of an environment variable every process of the launch inherits: finds
        # the ones that left the tree (a script's daemonized helper, an orphaned worker).
        self._env_marker = env_marker
        self.add(root_pid)

    def add(self, pid: int) -> None:
        try:
            self._seen.setdefault(pid, psutil.Process(pid).create_time())
        except psutil.Error:
            pass

    def refresh(self) -> None:
        for pid in list(self._seen):
            try:
                for child in psutil.Process(pid).children(recursive=True):
                    self._seen.setdefault(child.pid, child.create_time())
            except psutil.Error:
                continue

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
                p = psutil.Process(pid)
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
