"""Tracking and ending a launch's whole process tree.

The elastic launcher starts each rank in a session of its own (``start_new_session=True``), so a
signal to the launcher's process group does not reach the ranks. We therefore remember every
descendant we have ever seen (pid + create time, which guards against pid reuse) and end them all.
"""

from __future__ import annotations

import signal
import time

import psutil


class ProcessTree:
    def __init__(self, root_pid: int):
        self._seen: dict[int, float] = {}
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
        while self.alive() and time.time() < deadline:
            for p in self.alive():
                try:
                    p.kill()
                except psutil.Error:
                    pass
            time.sleep(0.1)
