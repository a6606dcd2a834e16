"""Records kept in memory and written in batches, off the training loop's path.

A rank's per-step records (its step events, its collective trace) are signed and written by a
daemon thread every ``FLUSH_S``, in one ``write_many`` per batch, instead of by the script's own
thread at each step: signing is canonical JSON plus an HMAC per record, which on a slow CPU costs
tens of microseconds each, a few per step. The flusher runs while the main thread is in C++ (a
backward pass, a collective's wait), which holds no GIL. Order is kept: records enter the buffer
in the order they happen and batches leave one at a time, oldest first. A record's ``t`` is when
it happened, not when it left.

What can be lost: a process killed with SIGKILL loses at most its last ``FLUSH_S`` of buffered
records (the harness's own fault injection flushes before it kills, and exit flushes). Records
that mark a moment the parent acts on (start, exit, faults) go through ``write_now``, which sends
what is buffered first, then the record, in one write.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from typing import Any

FLUSH_S = 0.1  # the longest a record waits in the buffer while the process lives


class Batched:
    def __init__(self, writer, thread_name: str = "trainwreck-flush"):
        self._w = writer
        self._thread_name = thread_name
        self._buf: list[dict[str, Any]] = []
        self._buf_lock = threading.Lock()  # taking a record into the buffer
        self._flush_lock = threading.Lock()  # one batch leaves at a time, in order
        self._flusher: threading.Thread | None = None
        self._pid = os.getpid()
        if hasattr(os, "register_at_fork"):  # a forked child (a DataLoader worker) starts empty
            me = weakref.ref(self)
            os.register_at_fork(after_in_child=lambda: (b := me()) is not None and b._after_fork())

    def write(self, rec: dict[str, Any]) -> None:
        """Take ``rec`` into the buffer; it leaves within ``FLUSH_S``."""
        with self._buf_lock:
            self._buf.append(rec)
        if self._flusher is None:
            self._start_flusher()

    def write_now(self, rec: dict[str, Any]) -> None:
        """Send what is buffered, then ``rec``, in one write, before returning."""
        with self._flush_lock:
            with self._buf_lock:
                batch, self._buf = self._buf, []
            batch.append(rec)
            self._w.write_many(batch)

    def flush(self) -> None:
        """Send what the buffer holds, in one write."""
        with self._flush_lock:
            with self._buf_lock:
                batch, self._buf = self._buf, []
            if batch:
                self._w.write_many(batch)

    def _start_flusher(self) -> None:
        with self._buf_lock:
            if self._flusher is not None:
                return
            self._flusher = threading.Thread(target=self._flush_every, args=(weakref.ref(self),),
                                             name=self._thread_name, daemon=True)
        self._flusher.start()

    @staticmethod
    def _flush_every(ref: weakref.ref) -> None:
        """The flusher thread's loop (holds the writer weakly: a test's can go)."""
        pid = os.getpid()
        while True:
            time.sleep(FLUSH_S)
            me = ref()
            if me is None or me._pid != pid or me._flusher is not threading.current_thread():
                return
            try:
                me.flush()
            except Exception:  # a closed writer at interpreter exit: nothing left to send to
                return
            del me

    def _after_fork(self) -> None:
        """In a forked child: the parent's buffered records are the parent's to send, its locks may
        have been held by a thread that does not exist here, and the flusher thread is gone."""
        self._buf = []
        self._buf_lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._flusher = None
        self._pid = os.getpid()
