"""Which rank caused a failed launch, and how each rank ended according to the elastic launcher.

When one rank dies, its peers usually die of its absence a moment later ("Connection closed by
peer" on gloo, a watchdog abort on NCCL), and torchrun then SIGTERMs whoever is left. Its own
"Root Cause" is the failure with the smallest whole-second timestamp, which cannot tell apart
failures seen in the same second, so we decide from the ranks' records first:

1. a rank whose exit record holds an exception of its own (not a lost peer, not a timeout),
   earliest first;
2. a rank that left no exit record: killed by the harness on purpose (a ``fault`` record), by a
   signal other than the launcher's SIGTERM (the OOM killer's SIGKILL, SIGSEGV, ...), or ended by
   ``os._exit``;
3. the first rank whose collective timed out (the process-group timeout ran out while it waited:
   its peers were late or somewhere else, not necessarily gone);
4. the launcher's root cause;
5. the first rank whose exception was a lost peer.

The error shown is the rank's traceback with the script's own frames kept: a long traceback is
cut in the library frames between them and the exception, never in the script's.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from harness import rundir
from harness.observe import RankObservation, is_library_path

# torchrun's failure block: "  rank      : 1 (local_rank: 1)" then "  exitcode  : -9 (pid: 123)".
_FAILURE = re.compile(r"rank\s*:\s*(?P<rank>\d+) \(local_rank: \d+\)\s*\n\s*exitcode\s*:\s*(?P<code>-?\d+)")
_BLOCK = "harness.bootstrap FAILED"
_ROOT = "Root Cause (first observed failure):"

# Errors a rank raises because another rank went away, not because of its own code.
PEER_LOSS = (
    "Connection closed by peer", "Connection reset by peer", "Broken pipe", "connectFullMesh failed",
    "remote process exited", "NCCL communicator was aborted", "ProcessGroupNCCL's watchdog",
    "DistNetworkError", "DistBackendError",
)
# A collective that waited out the process-group timeout: the peers may well be alive (busy).
TIMEOUT = ("Timed out waiting", "timed out", "Watchdog caught collective operation timeout")
SIGTERM = -15


def launcher_exit_codes(launcher_log: str) -> tuple[dict[int, int], int | None]:
    """Exit codes per global rank from the launcher's last failure block, and its root-cause rank.
    Negative codes are signals. Empty when the launcher reported no failure."""
    start = launcher_log.rfind(_BLOCK)
    if start < 0:
        return {}, None
    block = launcher_log[start:]
    codes = {int(m["rank"]): int(m["code"]) for m in _FAILURE.finditer(block)}
    root_at = block.find(_ROOT)
    root = _FAILURE.search(block, root_at) if root_at >= 0 else None
    return codes, int(root["rank"]) if root else None


def _last_line(error: str | None) -> str:
    return ((error or "").rstrip().splitlines()[-1:] or [""])[0]


def is_timeout(error: str | None) -> bool:
    return any(p in _last_line(error) for p in TIMEOUT)


def is_peer_loss(error: str | None) -> bool:
    return not is_timeout(error) and any(p in _last_line(error) for p in PEER_LOSS)


def find_failure(run_dir: Path, ranks: list[RankObservation]) -> dict[str, Any]:
    """``{"rank", "error", "reason", "note"}`` for a failed launch (rank None: the launcher itself)."""
    log = run_dir / "launcher.log"
    codes, root = launcher_exit_codes(log.read_text(errors="replace") if log.exists() else "")
    by_rank = {r.rank: r for r in ranks}
    raised = sorted((r for r in ranks if r.exit_status in ("exception", "sysexit")),
                    key=lambda r: r.exit_t or float("inf"))
    own = [r for r in raised if not is_peer_loss(r.error) and not is_timeout(r.error)]
    timed_out = [r for r in raised if is_timeout(r.error)]
    lost_peer = [r for r in raised if is_peer_loss(r.error)]
    # No exit record: the process died before the bootstrap could write one. The launcher's SIGTERM
    # of the survivors is the consequence of a failure, never its cause.
    died = [r for r in ranks if r.exit_status is None
            and (r.fault is not None or codes.get(r.rank, SIGTERM) != SIGTERM)]

    if own:
        chosen, reason = own[0], "exception"
    elif died:
        chosen = died[0]
        code = codes.get(chosen.rank)
        reason = ("killed by the harness (fault injection)" if chosen.fault is not None
                  else f"killed by signal {-code}" if code is not None and code < 0
                  else f"exited with code {code} without an exit record")
    elif timed_out:
        chosen, reason = timed_out[0], "timed out in a collective"
    elif root is not None and root in by_rank:
        chosen, reason = by_rank[root], f"first failure reported by the launcher (exit code {codes.get(root)})"
    elif lost_peer:
        chosen, reason = lost_peer[0], "lost a peer"
    else:
        unfinished = next((r for r in ranks if r.exit_status is None), None)
        if unfinished is None:
            return {"rank": None, "error": tail(log.read_text(errors="replace") if log.exists() else ""),
                    "reason": "the launcher failed", "note": None}
        chosen, reason = unfinished, "no exit record"

    if chosen.error:
        error = excerpt(chosen.error)
        if is_peer_loss(chosen.error):
            reason = "lost a peer"
    else:  # no traceback: what it printed last, and how it ended
        code = codes.get(chosen.rank)
        how = (f"called sys.exit({chosen.exit_code})" if chosen.exit_status == "sysexit"
               else f"died of signal {-code}" if code is not None and code < 0 else "ended")
        error = tail(stderr_tail(run_dir, chosen.rank) + f"\n(no Python traceback: the process {how} "
                     f"after optimizer step {chosen.steps})")
    return {"rank": chosen.rank, "error": error, "reason": reason, "note": _note(chosen, ranks)}


def _note(chosen: RankObservation, ranks: list[RankObservation]) -> str | None:
    """A rank that lost its peer often lost it to a peer that simply finished early: say so."""
    if not is_peer_loss(chosen.error):
        return None
    gone = [r for r in ranks if r.rank != chosen.rank and r.exit_status == "ok"
            and (r.exit_t or 0) <= (chosen.exit_t or float("inf"))]
    if not gone:
        return None
    who = ", ".join(f"rank {r.rank} (after step {r.steps})" for r in gone)
    return f"{who} had already exited normally while rank {chosen.rank} still waited for it in a collective"


_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line \d+, in ')


def _frame_file(line: str) -> str:
    m = _FRAME.match(line)
    assert m is not None  # called on the lines found as frames by this pattern
    return m["file"]


def excerpt(traceback_text: str, lines: int = 15) -> str:
    """At most about ``lines`` lines of a traceback, keeping the script's own frames (those outside
    torch, the harness and the stdlib) and the exception at the end; library frames between them
    are what gets cut, with a line that says so."""
    text = traceback_text.rstrip().splitlines()
    if len(text) <= lines:
        return "\n".join(text)
    frames: list[tuple[int, int]] = []  # (first line, end) of each frame entry
    for i, line in enumerate(text):
        if _FRAME.match(line):
            if frames:
                frames[-1] = (frames[-1][0], i)
            frames.append((i, len(text)))
    if not frames:
        return tail(traceback_text, lines)
    last_frame_end = frames[-1][0] + 1
    while last_frame_end < len(text) and text[last_frame_end].startswith("    "):
        last_frame_end += 1
    frames[-1] = (frames[-1][0], last_frame_end)
    head, message = text[:frames[0][0]], text[last_frame_end:]
    mine = [(a, b) for a, b in frames if not is_library_path(_frame_file(text[a]))]
    keep: set[int] = set()
    for a, b in mine:
        keep.update(range(a, b))
    budget = max(lines - len(head) - len(message) - len(keep) - 1, 0)
    for a, b in reversed(frames):  # then the innermost library frames, as room allows
        if (a, b) in mine or b - a > budget:
            continue
        keep.update(range(a, b))
        budget -= b - a
    out, cut = list(head), 0
    for i in range(frames[0][0], last_frame_end):
        if i in keep:
            if cut:
                out.append(f"  ... ({cut} lines of library frames)")
                cut = 0
            out.append(text[i])
        else:
            cut += 1
    if cut:
        out.append(f"  ... ({cut} lines of library frames)")
    return "\n".join(out + message[-6:])


def tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def stderr_tail(run_dir: Path, rank: int) -> str:
    path = rundir.rank_dir(run_dir, rank) / rundir.STDERR
    return tail(path.read_text(errors="replace")) if path.exists() else ""
