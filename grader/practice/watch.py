"""`trainwreck watch`: grade the workspace once, then again on every save of an editable file.

The loop is a pure function of its inputs, so tests drive it with fakes: ``changes`` yields, for
each batch of file-system events, the editable files touched (an empty set is a tick, yielded
every ``TICK_MS`` when nothing happens, so a grading in flight is polled); ``start`` starts a
grading and returns a job (``poll``, ``new_lines``, ``outcome``, ``cancel``); ``emit`` receives
each event as a dict (``event`` names it, ``t`` is seconds since the watch began).

A save whose content equals what is being (or was last) graded starts nothing (an editor that
rewrites a file unchanged, a ``touch``). A save while a grading runs cancels it first: a grading
of a file that no longer exists in that form is of no use to anyone.

The real events come from watchfiles (Rust ``notify``: inotify on Linux, FSEvents on macOS), which
groups a burst of events into one batch once ``STEP_MS`` pass without another: an editor's save
(a temporary file, a rename, a chmod) is one batch, so one grading.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol

TICK_MS = 200  # how often a grading in flight is polled when no file changes
STEP_MS = 100  # quiet time that closes a batch of events (one save)
DEBOUNCE_MS = 1600  # the longest a continuous burst of events is grouped before it is handed over

Emit = Callable[[dict[str, Any]], None]


class Job(Protocol):
    def poll(self) -> bool: ...

    def new_lines(self) -> list[str]: ...

    def outcome(self) -> Any: ...  # .code, .view, .error

    def cancel(self) -> Any: ...  # .seconds, .ended_by_sweep


def file_changes(root: Path, names: list[str]) -> Iterator[set[str]]:
    """Which of ``names`` (relative to ``root``) each batch of file-system events touched; an empty
    set every ``TICK_MS`` without events. Ctrl-C raises KeyboardInterrupt out of it."""
    from watchfiles import watch

    root = Path(root).resolve()
    targets = {str(root / n): n for n in names}
    # every batch is handed over unfiltered (and filtered here), so a busy folder still lets the
    # loop poll its grading; recursive only where an editable file lies in a subfolder
    for batch in watch(root, watch_filter=None, step=STEP_MS, debounce=DEBOUNCE_MS, rust_timeout=TICK_MS,
                       yield_on_timeout=True, recursive=any("/" in n for n in names)):
        yield {targets[p] for _, p in batch if p in targets}


def run(names: list[str], digest: Callable[[], str | None], start: Callable[[int], Job],
        changes: Iterable[set[str]], emit: Emit, *, max_runs: int | None = None,
        last: tuple[str, dict[str, Any]] | None = None, keys: Callable[[], str] | None = None) -> int:
    """Watch until ``changes`` ends, ``max_runs`` gradings have finished (cancelled ones do not
    count), Ctrl-C or the key q; returns the number of gradings finished. ``digest`` is the editable
    files' digest now (None while one is missing); ``last`` is the digest and view of the last
    recorded grading, re-shown instead of grading again when nothing changed since. ``keys`` (polled
    at every batch or tick) gives the keys typed since: g grades now, changed or not (unless a
    grading runs: ``busy``), q stops (cancelling the grading in flight); any other is a ``key``
    event for the caller (h hint, l list)."""
    t0 = time.monotonic()
    job: Job | None = None
    n = finished = 0
    running: str | None = None  # digest of what the job in flight grades
    graded: str | None = None  # digest of what was graded last

    def say(event: str, **kw: Any) -> None:
        emit({"event": event, "t": round(time.monotonic() - t0, 3), **kw})

    def begin(reason: str, files: list[str], d: str) -> None:
        nonlocal job, n, running
        n += 1
        running = d
        job = start(n)
        say("grading", n=n, reason=reason, files=files)

    def stop(reason: str, files: list[str]) -> None:
        nonlocal job
        assert job is not None
        c = job.cancel()
        say("cancelled", n=n, reason=reason, files=files, seconds=c.seconds, ended_by_sweep=c.ended_by_sweep)
        job = None

    say("watching", files=list(names))
    try:
        now = digest()
        if now is None:
            say("missing", files=[x for x in names])
        elif last is not None and last[0] == now:
            graded = now
            say("unchanged", view=last[1])
        else:
            begin("start", [], now)
        for changed in changes:
            if job is not None:
                for line in job.new_lines():
                    say("progress", n=n, line=line)
                if job.poll():
                    for line in job.new_lines():
                        say("progress", n=n, line=line)
                    out = job.outcome()
                    job, graded = None, running
                    finished += 1
                    if out.view is not None:
                        say("result", n=n, code=out.code, view=out.view)
                    else:
                        say("error", n=n, code=out.code, message=out.error)
                    if max_runs is not None and finished >= max_runs:
                        break
            quit_ = False
            for k in keys() if keys is not None else "":
                if k == "q":
                    quit_ = True
                    break
                if k != "g":
                    say("key", key=k)
                elif job is not None:
                    say("busy", n=n)
                elif (now := digest()) is None:
                    say("missing", files=list(names))
                else:
                    begin("asked", [], now)
            if quit_:
                if job is not None:
                    stop("quit", [])
                say("stopped", reason="quit", finished=finished)
                return finished
            if not changed:
                continue
            now = digest()
            if now is None:
                say("missing", files=sorted(changed))
                continue
            if now == (running if job is not None else graded):
                continue  # saved unchanged
            if job is not None:
                stop("saved", sorted(changed))
            begin("saved", sorted(changed), now)
    except KeyboardInterrupt:
        if job is not None:
            stop("interrupted", [])
        say("stopped", reason="interrupted", finished=finished)
        return finished
    finally:
        if job is not None:  # an error on the way out (or the caller's): nothing is left running
            stop("stopped", [])
    say("stopped", reason="max-runs" if max_runs is not None and finished >= max_runs else "end", finished=finished)
    return finished
