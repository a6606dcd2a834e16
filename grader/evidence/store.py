"""The artifact store's own account of a run (``<run_dir>/store.jsonl``, written and signed by the
store service, a process outside the ranks: ``harness/store_service.py``), and what it says each
object in the store held over time.

The service knows what it received and when, and the bytes' sha256, never what they mean. What a
version holds is told by content: a script's upload is a plain S3 request (``harness.store_relay``)
that nothing in the rank traces, so the version is the watched file (``grader/evidence/watched.py``)
whose very bytes the store received, seen by the parent before the store published them. The kit's
own client (``harness.workloads.ArtifactStore``, which test kits use) is traced too: its upload
counts when the trace and the service agree (the service's receipt id, an upload that began before
the service started reading and ended after it published, as many bytes as the source file held).
Files that appear in the store's folder any other way (copied in by the script, found there at the
end but never uploaded, changed after the service published them) are reported by name: a real
object store cannot be written by copying files.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grader.evidence import watched
from grader.evidence.saves import FileOp, FileState
from harness import rundir
from harness.store_service import KEPT_DIR, LOG

if TYPE_CHECKING:
    from grader.evidence import RunEvidence

TIMELINE_TOLERANCE_S = 0.05  # the rank's and the service's clocks are the same machine's


@dataclass
class StoreLog:
    start: dict[str, Any] | None
    puts: list[dict[str, Any]] = field(default_factory=list)
    deletes: list[dict[str, Any]] = field(default_factory=list)
    stop: dict[str, Any] | None = None
    forged: int = 0

    @property
    def root(self) -> str | None:
        return (self.start or {}).get("root")

    @property
    def mib_per_s(self) -> float | None:
        return (self.start or {}).get("mib_per_s")


def read_store(run_dir: Path, key: str) -> StoreLog | None:
    path = Path(run_dir) / LOG
    if not path.exists():
        return None
    recs = rundir.read_records(path, key)
    log = StoreLog(start=None, forged=recs.forged)
    for r in recs.valid:
        kind = r.get("kind")
        if kind == "store_start" and log.start is None:
            log.start = r
        elif kind == "put":
            log.puts.append(r)
        elif kind == "delete" and r.get("status") == "ok":
            log.deletes.append(r)
        elif kind == "store_stop":
            log.stop = r
    return log


@dataclass
class StoreObjects:
    history: dict[str, FileState]  # per object path: what it held, as the store published it
    rejected: list[str] = field(default_factory=list)  # uploads whose content cannot be told, and why
    foreign: list[str] = field(default_factory=list)  # the store's folder written other than by uploads
    info: dict[str, Any] = field(default_factory=dict)


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def store_objects(ev: RunEvidence) -> StoreObjects | None:
    """The objects of the run's store over time, each version tied to the traced write its bytes
    came from (None when the run had no store)."""
    log: StoreLog | None = ev.store
    if log is None or not log.root:
        return None
    root = os.path.realpath(log.root)
    out = StoreObjects(history={})
    uploads = {o.upload_id: o for o in ev.file_uploads if o.upload_id is not None}
    events: list[tuple[float, int, str, FileOp | None]] = []
    ok = [p for p in log.puts if p.get("status") == "ok"]
    out.info.update(uploads=len(ok), bytes=sum(int(p.get("bytes") or 0) for p in ok),
                    mib_per_s=log.mib_per_s, aborted=sum(p.get("status") == "aborted" for p in log.puts),
                    refused=sum(p.get("status") == "refused" for p in log.puts))
    if ok:
        durs = [float(p["t1"]) - float(p["t0"]) for p in ok]
        out.info.update(upload_s_min=round(min(durs), 3), upload_s_max=round(max(durs), 3))
    for p in ok:
        name, path = str(p.get("name")), str(p.get("path") or os.path.join(root, str(p.get("name"))))
        uid = p.get("id")
        held, why = _content(ev, p, uploads.get(uid) if isinstance(uid, int) else None)
        if why:
            out.rejected.append(f"{name} (uploaded at {float(p['t1']):.2f}): {why}")
        events.append((float(p["t1"]), int(p.get("id") or 0), path, held))
    for d in log.deletes:
        events.append((float(d["t"]), 0, str(d.get("path") or os.path.join(root, str(d.get("name")))), None))
    for t, _, path, held in sorted(events, key=lambda e: (e[0], e[1])):
        st = out.history.setdefault(os.path.realpath(path), FileState(os.path.realpath(path)))
        st.timeline.append((t, held))
        if held is not None:
            st.versions.append((t, held))
            st.writers.add(held.rank)
        st.published = True
    # the folder written other than through the store (files a reader of it sees named first)
    ops = [o for o in ev.file_ops if o.path and _within(os.path.realpath(o.path), root)]
    for o in sorted(ops, key=lambda o: Path(o.dest).name.startswith(".")):
        verb = {"save": "torch.save", "copy": "a file copy", "rename": "a rename",
                "write": "a DCP write"}.get(o.op, o.op)
        out.foreign.append(f"{Path(o.dest).name} was written there by rank {o.rank} ({verb} at step {o.step})")
    stop = log.stop or {}
    for f in stop.get("foreign", []):
        if not any(f["name"] in x for x in out.foreign):
            out.foreign.append(f"{f['name']} was there at the end ({f.get('bytes', 0)} bytes, a {f.get('kind', 'file')})"
                               " and the store never received it")
    for name in stop.get("changed", []):
        out.foreign.append(f"{name} changed after the store published it")
    if stop.get("root_replaced"):
        out.foreign.append("the folder itself was replaced during the run")
    if log.stop is None:
        out.info["no_stop_record"] = True
    return out


def _content(ev: RunEvidence, put: dict[str, Any], client: FileOp | None) -> tuple[FileOp | None, str]:
    """The traced write whose bytes this upload carried, or why that cannot be told. Where the trace
    cannot tell (a plain S3 request: nothing in the rank traces it; a writer process the bootstrap
    never ran in; a source that held bytes the trace never saw written), a version of a watched file
    with the very bytes the store received, seen by the parent before the store published them
    (``grader/evidence/watched.py``); else the store's own copy of what it received (``kept``: bytes
    sent from memory, or from a file nobody watched), read like a watched version."""
    held, why = _traced(ev, put, client)
    if held is None and why.startswith(_UNTOLD):
        w = ev.watched
        seen = w.by_digest(str(put.get("sha256")), float(put["t1"])) if w and put.get("sha256") else None
        if w is not None and seen is not None:
            return w.op(ev, seen), ""
        if put.get("kept"):
            op = watched.as_op(ev, watched.Observation(
                "version", str(put.get("path") or ""), float(put["t1"]), float(put["t0"]), bytes=put.get("bytes"),
                sha256=put.get("sha256"), kept=Path(ev.run_dir) / KEPT_DIR / str(put["kept"]),
                index=_KEPT_INDEX0 + int(put.get("id") or 0)))
            if op.error is None:
                return op, ""
            why = f"the store's copy of it cannot be read: {op.error}"
    return held, why


_UNTOLD = ("no traced upload sent it", "its source ")
_KEPT_INDEX0 = 10**5  # the store's copies, read as watched versions: indices no watch.jsonl record has


def _traced(ev: RunEvidence, put: dict[str, Any], client: FileOp | None) -> tuple[FileOp | None, str]:
    if client is None:
        return None, ("no traced upload sent it, and no file the parent watched held its bytes before the store "
                      "published it (upload the checkpoint file itself, once it is complete)")
    t0, t1 = float(put["t0"]), float(put["t1"])
    if client.t_begin > t0 + TIMELINE_TOLERANCE_S or (client.t_end is not None
                                                      and client.t_end < t1 - TIMELINE_TOLERANCE_S):
        return None, (f"the rank's record of this upload ({client.t_begin:.3f}-{client.t_end or 0:.3f}) contradicts "
                      f"the store's ({t0:.3f}-{t1:.3f})")
    if client.sha256 and client.sha256 != put.get("sha256"):
        return None, "the digest the rank recorded is not the one the store computed"
    if not client.src:
        return None, "its upload names no source file"
    st = ev.file_history.get(client.src) or ev.file_history.get(os.path.realpath(client.src))
    held = st.held_at(client.t_begin) if st else None
    if held is None or (held.fp is None and held.op != "save"):
        return None, f"its source {Path(client.src).name} held no complete, traced checkpoint when it was sent"
    if held.bytes is not None and int(held.bytes) != int(put.get("bytes") or 0):
        return None, (f"the store received {put.get('bytes')} bytes, but {Path(client.src).name} held "
                      f"{held.bytes} then")
    return held, ""
