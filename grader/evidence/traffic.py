"""What the ranks' collective trace claims against what crossed the wire.

A sandboxed run has a network namespace of its own, so its loopback carries only what the run's
processes send each other: on gloo, every collective's payload and the rendezvous store. The parent
reads the kernel's count of bytes sent on it at every sample (``proc.jsonl``: ``net_tx``, written by
``harness.procwatch``); the collective trace, written in the rank, says what each collective was
handed (``bytes``: the input on that rank), stamped by the parent on receipt (``rt``). Over the span
between the first and the last sample, the bytes the trace claims and the bytes the kernel counted
should agree within the algorithms' factor: at world size 2 a ring all-reduce sends each rank's
input once (ratio ~1), a broadcast only the root's (0.5).

A trace that claims collectives nothing sent (records written by the script itself, a collective
faked) is far below that: ``sent / claimed`` under ``MIN_RATIO``. Traffic far above what the trace
claims went past the trace (the script's own sockets, a process group the trace did not see).

Not observable: NCCL (its payload goes over NVLink, PCIe or shared memory, not loopback), a run that
shares the parent's namespace (unisolated: the host's loopback), and a run too short for two samples
(``None``). Measured margins are in ``MIN_RATIO`` and ``MAX_RATIO``'s comments."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# A run must claim at least this much for the ratio to say anything: the store's and the channel's
# own chatter is some kilobytes a second.
MIN_CLAIMED = 4 * 2**20
# Measured (22 sandboxed runs on gloo at world size 2, 2-core machine, load about 12: the main,
# throughput, restart and reference runs of `trainwreck verify comm-bound memory-leak sampler-replay`,
# read by benchmarks/traffic.py): sent / claimed 0.988 to 1.042, over 134 to 13,416 collective records,
# a killed and restarted run included (1.009). A broadcast-only job would sit at 0.5: the floor is half
# of that, 4x under the honest least.
MIN_RATIO = 0.25
MAX_RATIO = 8.0  # 7.7x the honest most
SLACK = 2 * 2**20  # store traffic and TCP framing, whatever the payload


@dataclass(frozen=True)
class Traffic:
    sent: int  # bytes on the run's loopback between the first and the last sample
    claimed: int  # bytes the collective records received in that span say were handed to collectives
    span_s: float
    records: int

    @property
    def ratio(self) -> float:
        return self.sent / self.claimed if self.claimed else float("inf")

    def to_json(self) -> dict[str, Any]:
        return {"sent": self.sent, "claimed": self.claimed, "span_s": round(self.span_s, 3),
                "records": self.records, "ratio": round(self.ratio, 3) if self.claimed else None}


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def measure(samples: list[dict[str, Any]], collectives: list[dict[str, Any]]) -> Traffic | None:
    """``samples``: every rank's ``proc.jsonl`` records; ``collectives``: every rank's collective
    trace. None where the samples carry no loopback count (not sandboxed) or fewer than two."""
    pts = sorted((t, int(n)) for s in samples
                 if (t := _num(s.get("t"))) is not None and isinstance(n := s.get("net_tx"), int))
    if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
        return None
    t0, t1 = pts[0][0], pts[-1][0]
    claimed, n = 0, 0
    for c in collectives:
        rt = _num(c.get("rt"))
        if c.get("ph") == "enter" and isinstance(c.get("bytes"), int) and rt is not None and t0 < rt <= t1:
            claimed += c["bytes"]
            n += 1
    return Traffic(sent=max(0, pts[-1][1] - pts[0][1]), claimed=claimed, span_s=t1 - t0, records=n)


def unsent(tr: Traffic | None) -> str | None:
    """Collectives the trace claims that never crossed the wire, in one sentence (a verdict rests on
    it); None where the claims hold or cannot be held against anything."""
    if tr is None or tr.claimed < MIN_CLAIMED or tr.sent >= MIN_RATIO * tr.claimed:
        return None
    return (f"the collective trace claims {_mb(tr.claimed)} handed to collectives in {tr.span_s:.1f} s, and the "
            f"run's loopback carried {_mb(tr.sent)} in that time: collectives claimed that never sent their data")


def disagreement(tr: Traffic | None) -> str | None:
    """What is wrong with the trace's claims, in one sentence: claims never sent, or traffic the trace
    did not see; None where they hold (or cannot be held against anything)."""
    if tr is None or tr.claimed < MIN_CLAIMED:
        return None
    if tr.sent > MAX_RATIO * tr.claimed + SLACK:
        return (f"the run's loopback carried {_mb(tr.sent)} in {tr.span_s:.1f} s, and the collective trace accounts "
                f"for {_mb(tr.claimed)}: traffic the trace did not see")
    return unsent(tr)


def _mb(n: float) -> str:
    return f"{n / 2**20:.1f} MB"
