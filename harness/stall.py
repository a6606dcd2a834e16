"""What a job that has stopped making progress is doing: a deadlock, a straggler, or no progress at
all. Pure functions over what the parent gathered (``harness.stallwatch``); no clock, no files.

A hang is a collective that cannot complete: ranks waiting in a collective for a peer that is
itself waiting in another one, or gone. A rank outside any collective (sleeping, reading a socket
or a file, in uninterruptible I/O, waiting on a lock) is a straggler: its peers wait for it, and it
may come back, so a watcher that ended the job then would change whether the job finishes. Only a
deadlock is ended at the hang timeout; the rest is reported and left to the stall limit, no shorter
than the process group's own timeout (``harness.monitor``).

Per rank, the collective trace is the primary signal (the newest collective entered and never seen
complete), and the main thread's state in /proc the cross-check (``harness.threadstate``): a
collective issued with ``async_op`` or from another thread stays open while the main thread does
other things, so then a thread that is certainly elsewhere (sleeping, reading, writing, state D)
is outside. A synchronous collective on the main thread has not returned: the rank is in it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.paths import display_path
from harness.threadstate import ThreadState

DEADLOCK, STRAGGLER, NO_PROGRESS = "deadlock", "straggler", "no progress at all"
IN_COLLECTIVE, OUTSIDE, EXITED, UNSEEN = "waiting in a collective", "outside any collective", "exited", "not seen"


@dataclass
class RankFacts:
    rank: int
    exited: bool = False
    exit_status: str | None = None
    open: list[dict[str, Any]] = field(default_factory=list)  # entered, not seen complete, oldest first
    thread: ThreadState | None = None  # its main thread, from /proc (None: gone or unreadable)
    site: str | None = None  # the line its main thread's stack showed, when one was asked for
    quiet_s: float | None = None  # since its last record or CPU use, by the parent's clock
    last_step: int = 0


@dataclass
class RankView:
    rank: int
    state: str  # IN_COLLECTIVE, OUTSIDE, EXITED or UNSEEN
    collective: dict[str, Any] | None  # the one it waits in; outside: one it left open (async)
    doing: str | None  # outside: what /proc shows ("sleeping", "reading a socket", ...)
    site: str | None  # the line it is at: its stack's, else the collective's call site
    quiet_s: float | None
    exit_status: str | None = None

    @property
    def waiting_in(self) -> dict[str, Any]:
        """The collective of a rank IN_COLLECTIVE (such a view always has one)."""
        assert self.collective is not None, f"rank {self.rank} waits in no collective"
        return self.collective

    def to_json(self) -> dict[str, Any]:
        c = self.collective
        return {"rank": self.rank, "state": self.state, "doing": self.doing, "site": self.site,
                "quiet_s": None if self.quiet_s is None else round(self.quiet_s, 2),
                "collective": {k: c.get(k) for k in ("op", "seq", "site", "async")} if c else None}


@dataclass
class Stall:
    kind: str  # DEADLOCK, STRAGGLER or NO_PROGRESS
    ranks: list[RankView]
    whole_world: bool  # every rank of the job was seen (one node of a multi-node job sees its own)

    @property
    def key(self) -> tuple[Any, ...]:
        """What a change of makes a new state of the stall (its time restarts)."""
        return (self.kind, tuple((v.rank, v.state, (v.collective or {}).get("seq")) for v in self.ranks))

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "whole_world": self.whole_world, "ranks": [v.to_json() for v in self.ranks],
                "summary": summary(self)}


def waited_on(open_: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The collective a rank's main thread would be in: the newest open one issued there, else
    the newest open one at all."""
    on_main = [c for c in open_ if c.get("main", True)]
    return on_main[-1] if on_main else open_[-1] if open_ else None


def view(f: RankFacts) -> RankView:
    if f.exited:
        return RankView(f.rank, EXITED, None, None, f.site, f.quiet_s, f.exit_status)
    c = waited_on(f.open)
    doing = f.thread.describe() if f.thread is not None else None
    if c is None:
        return RankView(f.rank, OUTSIDE, None, doing, f.site, f.quiet_s)
    synchronous = not c.get("async") and c.get("main", True)
    if not synchronous and f.thread is not None and f.thread.outside:
        return RankView(f.rank, OUTSIDE, c, doing, f.site, f.quiet_s)  # left open, not waited on
    return RankView(f.rank, IN_COLLECTIVE, c, None, f.site or c.get("site"), f.quiet_s)


def classify(facts: list[RankFacts], world_size: int) -> Stall:
    """Deadlock: every rank of the job is seen, and every one that lives waits in a collective.
    Straggler: some wait in a collective while another is outside one (or not seen: not started,
    or on another node). No progress at all: none waits in a collective."""
    views = [view(f) for f in sorted(facts, key=lambda f: f.rank)]
    seen = {v.rank for v in views}
    views = sorted(views + [RankView(r, UNSEEN, None, None, None, None) for r in range(world_size) if r not in seen],
                   key=lambda v: v.rank)
    waiting = [v for v in views if v.state == IN_COLLECTIVE]
    others = [v for v in views if v.state in (OUTSIDE, UNSEEN)]
    whole = all(r in seen for r in range(world_size))
    kind = NO_PROGRESS if not waiting else STRAGGLER if others else DEADLOCK
    return Stall(kind, views, whole)


def _at(v: RankView) -> str:
    return f" at {display_path(v.site, keep=2)}" if v.site else ""


def _coll(c: dict[str, Any]) -> str:
    return f"{c.get('op')} #{c.get('seq')}" + (f" (called at {display_path(c['site'], keep=2)})" if c.get("site") else "")


def _for(v: RankView) -> str:
    return f" for {v.quiet_s:.1f} s" if v.quiet_s is not None else ""


def _who(views: list[RankView]) -> str:
    return ("rank " if len(views) == 1 else "ranks ") + ", ".join(str(v.rank) for v in views)


def rank_line(v: RankView) -> str:
    """One rank, for the live report, hang.txt and the summary."""
    if v.state == EXITED:
        return f"rank {v.rank} has exited" + (f" ({v.exit_status})" if v.exit_status else "")
    if v.state == UNSEEN:
        return f"rank {v.rank} was never seen by this launcher (another node's, or not started)"
    if v.state == IN_COLLECTIVE:
        return f"rank {v.rank} waits in {_coll(v.waiting_in)}{_for(v)}"
    left = f", with {v.collective.get('op')} #{v.collective.get('seq')} issued and not waited on" \
        if v.collective else ""
    return f"rank {v.rank} is outside any collective{_at(v)}, {v.doing or 'state unknown'}{left}{_for(v)}"


def summary(stall: Stall) -> list[str]:
    """The stall in words: the first line says which kind and who waits for whom; one line per rank."""
    waiting = [v for v in stall.ranks if v.state == IN_COLLECTIVE]
    gone = [v for v in stall.ranks if v.state == EXITED]
    if stall.kind == DEADLOCK:
        groups: dict[tuple[Any, Any], list[RankView]] = {}
        for v in waiting:
            groups.setdefault((v.waiting_in.get("op"), v.waiting_in.get("seq")), []).append(v)
        if gone:
            head = (f"deadlock: {_who(waiting)} wait{'s' if len(waiting) == 1 else ''} in a collective for "
                    f"{_who(gone)}, which {'has' if len(gone) == 1 else 'have'} exited")
        elif len(groups) == 1:
            head = f"deadlock: every rank waits in {_coll(waiting[0].waiting_in)} and none completes it"
        else:
            head = "deadlock: " + "; ".join(
                f"{_who(vs)} wait{'s' if len(vs) == 1 else ''} in {_coll(vs[0].waiting_in)}" for vs in groups.values()
            ) + ": each waits for a peer that is in another collective"
    elif stall.kind == STRAGGLER:
        out = [v for v in stall.ranks if v.state == OUTSIDE]
        unseen = [v for v in stall.ranks if v.state == UNSEEN]
        whom = [f"{_who(out)}, which {'is' if len(out) == 1 else 'are'} outside any collective"] if out else []
        whom += [f"{_who(unseen)}, never seen by this launcher (another node's, or not started)"] if unseen else []
        head = f"straggler: {_who(waiting)} wait{'s' if len(waiting) == 1 else ''} in a collective for " + \
            " and for ".join(whom)
    else:
        head = "no progress at all: no rank waits in a collective and none uses CPU"
    return [head] + [rank_line(v) for v in stall.ranks]
