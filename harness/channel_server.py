"""The parent's side of the channel (protocol in ``harness.channel``): receive what the ranks send,
attribute each connection to a rank from outside, sign and store it in the run dir.

The parent holds the run key; no process of the run ever does. What a rank sends is still only
what the rank *claims* (the script shares the rank's address space and can send records itself),
so the server adds what only it knows: its own receive time (``rt``), the attempt the sending
process is in (``attempt``, or ``a`` where the stream uses that key: from the process's launch
environment, never from the record; a different claim is kept as ``claimed_attempt``) and, for
``boot`` and ``start``, the rank's real pid outside the sandbox (``pid``: the rank's process as the
parent identified it, even where a child of it sent the record, whose pid is then ``sender_pid``; the
rank's own view is kept as ``ns_pid``), and counts everything that looks like tampering: connections from processes that are
no rank, malformed or oversized lines, records for an attempt the process is not in, records that
arrive long after the time they carry (held back) or carry a time still to come, floods past the
caps.

Memory stays bounded whatever the peers send: each connection buffers at most one line (1 MiB),
bytes past a cap are read and discarded (a rank writing to a full pipe would otherwise block in
``print``), and the number of connections per rank is capped. One thread serves every connection
with a selector.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import socket
import stat
import struct
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import BinaryIO, Protocol

from harness import rundir
from harness.channel import HELLO_MAX, SOCKET_NAME, VERSION
from harness.procwatch import cmdline

RECORD_STREAMS = frozenset({rundir.EVENTS, rundir.COLLECTIVES, rundir.SAMPLES, rundir.LOADS, rundir.SAVES,
                            "profile.jsonl"})
BYTE_STREAMS = frozenset({rundir.STDOUT, rundir.STDERR, rundir.STACKS})
FILE_NAME = re.compile(r"^(final_params\.safetensors|trace\.a\d{1,4}\.pt\.trace\.json)$")
STATS_FILE = "channel.json"
READ_CHUNK = 1 << 16
EXAMPLES = 10  # refused peers kept for the report
# A record's own time (``t``) against the parent's receive time: events and save records are sent as
# they are made, collective records in batches. Measured (python benchmarks/record_lag.py over 26
# gradings made while a CI run shared the 2-core machine, load 3-5): events p99 13 ms, at most 86 ms;
# saves at most 42 ms; collective batches p99 0.11 s, at most 0.21 s. A record later than LATE_S
# (4.8x the slowest) was held back in the rank (the "held and released later" forgery; its times
# are then the rank's word only), one ahead by more than AHEAD_S was stamped with a time that had
# not come: both are counted, as tampering, for the interviewer.
LATE_S = 1.0
AHEAD_S = 0.1
TIMED_STREAMS = frozenset({rundir.EVENTS, rundir.SAVES, rundir.COLLECTIVES})  # sent as they are made


class Peer(Protocol):
    rank: int
    attempt: int
    pid: int


@dataclass(frozen=True)
class ServerLimits:
    line_bytes: int = 1 << 20  # one record line
    records_bytes: int = 64 << 20  # per rank, every record stream together (the largest grading: 10 MB)
    log_bytes: int = 16 << 20  # per rank and byte stream
    file_bytes: int = 256 << 20  # per file
    connections: int = 64  # open at once, per rank


@dataclass
class RankStats:
    records: int = 0
    record_bytes: int = 0
    connections: int = 0
    dropped_by_rank: int = 0  # records the rank said it could not send (its parent-side timeout)
    over_cap_bytes: int = 0  # record bytes read and discarded past records_bytes
    oversize_lines: int = 0
    bad_lines: int = 0  # not JSON, not {"s": known stream, "r": object}
    attempt_mismatch: int = 0  # a record claiming another attempt than its process is in
    foreign_starts: int = 0  # boot or start records sent by a process under the rank, not the rank's own
    late: int = 0  # records received more than LATE_S after the time they say they were made
    ahead: int = 0  # records that say they were made more than AHEAD_S after they were received
    worst_lag_s: float = 0.0
    torn: int = 0  # a connection that ended inside a line, or a file shorter than announced
    refused_connections: int = 0  # past the per-rank cap, or a bad hello
    log_bytes: dict[str, int] = field(default_factory=dict)
    log_dropped: dict[str, int] = field(default_factory=dict)
    files: dict[str, int] = field(default_factory=dict)
    refused_files: list[str] = field(default_factory=list)


@dataclass
class _Conn:
    sock: socket.socket
    pid: int
    peer: Peer | None = None
    mode: str = "hello"
    name: str = ""
    size: int = 0
    got: int = 0
    buf: bytearray = field(default_factory=bytearray)
    skipping: bool = False  # inside an oversized line: discard up to its newline
    fh: BinaryIO | None = None  # open file for bytes / file modes
    part: Path | None = None

    @property
    def who(self) -> Peer:
        """The peer its hello named: every mode after "hello" has one."""
        assert self.peer is not None
        return self.peer

    @property
    def sink(self) -> BinaryIO:
        """The open file of a bytes or file connection."""
        assert self.fh is not None
        return self.fh

    @property
    def staged(self) -> Path:
        """Where a file connection writes until the file is whole."""
        assert self.part is not None
        return self.part


DIR_PREFIX = "tw-chan-"


def sweep_stale(tmp: Path | None = None) -> list[Path]:
    """Remove channel folders a killed grader left behind (SIGKILL runs no clean-up: its folder stays,
    holding a dead socket). A folder is ``tw-chan-<pid>-<random>``; it is stale when it is ours and
    that pid is gone. Returns what was removed."""
    removed = []
    for d in Path(tmp or tempfile.gettempdir()).glob(f"{DIR_PREFIX}*-*"):
        try:
            pid = int(d.name[len(DIR_PREFIX):].split("-", 1)[0])
            st = os.lstat(d)
        except (ValueError, OSError):
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or pid == os.getpid() or _alive(pid):
            continue
        for child in list(d.iterdir()) if d.is_dir() else []:
            child.unlink(missing_ok=True)
        try:
            d.rmdir()
            removed.append(d)
        except OSError:
            pass
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ChannelServer:
    def __init__(self, run_dir: Path, key: str, identify: Callable[[int], Peer | None],
                 limits: ServerLimits = ServerLimits(), uid: int | None = None):
        """``identify(pid)``: the rank a peer pid belongs to, from outside (procwatch), or None.
        ``uid``: the sandbox's uid when it is not ours, given the socket so it can connect."""
        self.run_dir = Path(run_dir)
        self.key = key
        self.identify = identify
        self.limits = limits
        sweep_stale()
        # short (sun_path holds 108 bytes), and naming the grader's pid, so a later one can tell it stale
        self.dir = Path(tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-"))
        self.path = self.dir / SOCKET_NAME
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(self.path))
        if uid is not None:
            os.chown(self.path, uid, uid)
        os.chmod(self.path, 0o600)
        os.chmod(self.dir, 0o711)  # the sandbox's uid may reach the socket, not list the folder
        self._listener.listen(64)
        self._listener.setblocking(False)
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._listener, selectors.EVENT_READ, None)
        self._conns: dict[int, _Conn] = {}
        # the run's settings, handed to a rank that asks (harness.bootstrap): never in the sandbox's
        # environment, where any process of the run could read them (/proc/<pid>/environ)
        self.settings: dict[str, str] = {}
        self._files: dict[tuple[int, str], BinaryIO] = {}
        self.ranks: dict[int, RankStats] = {}
        self.refused_peers = 0
        self.refused_examples: list[dict] = []
        self.bad_hellos = 0
        self._stop = threading.Event()
        self._draining = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="trainwreck-channel", daemon=True)

    # -- life cycle ------------------------------------------------------------------------
    def start(self) -> ChannelServer:
        self._thread.start()
        return self

    def stop(self, drain_s: float = 5.0) -> dict:
        """Once the sandbox is gone: read what is still in flight or queued until every peer has
        closed (they all have, with their processes) or ``drain_s`` passes, write ``channel.json``,
        remove the socket."""
        self._draining.set()  # the loop ends once nothing is open or queued to be accepted
        self._thread.join(timeout=drain_s)
        self._stop.set()
        self._thread.join(timeout=5)
        for c in list(self._conns.values()):
            self._close(c, eof=False)
        for fh in self._files.values():
            fh.close()
        self._files.clear()
        self._sel.close()
        self._listener.close()
        for p in (self.path, self.dir):
            try:
                p.unlink() if p == self.path else p.rmdir()
            except OSError:
                pass
        stats = self.stats()
        rundir.atomic_write_json(self.run_dir / STATS_FILE, stats)
        return stats

    def stats(self) -> dict:
        return {"ranks": {str(r): asdict(s) for r, s in sorted(self.ranks.items())},
                "refused_peers": self.refused_peers, "refused_examples": self.refused_examples,
                "bad_hellos": self.bad_hellos, "limits": asdict(self.limits),
                "tampering": self.tampering()}

    def tampering(self) -> list[str]:
        """One line per sign that something other than the harness used the channel."""
        out = []
        if self.refused_peers:
            out.append(f"{self.refused_peers} connection(s) from processes that are no rank "
                       "(a helper or daemon of the script) were refused")
        if self.bad_hellos:
            out.append(f"{self.bad_hellos} connection(s) opened without a valid hello")
        for r, s in sorted(self.ranks.items()):
            for what, n in (("lines that are no record", s.bad_lines), ("oversized lines", s.oversize_lines),
                            ("records for another attempt", s.attempt_mismatch),
                            ("boot or start records sent by a process under the rank, not the rank itself",
                             s.foreign_starts),
                            (f"records received more than {LATE_S:g} s after the time they carry (held back in "
                             f"the rank; the latest {s.worst_lag_s:g} s)", s.late),
                            ("records carrying a time later than their arrival", s.ahead),
                            ("record bytes past the cap, discarded", s.over_cap_bytes),
                            ("records the rank could not send", s.dropped_by_rank),
                            ("connections refused", s.refused_connections)):
                if n:
                    out.append(f"rank {r}: {n} {what}")
            for name, n in s.log_dropped.items():
                out.append(f"rank {r}: {name} truncated at {self.limits.log_bytes >> 20} MiB, {n} bytes dropped")
            for name in s.refused_files:
                out.append(f"rank {r}: file {name} refused (over {self.limits.file_bytes >> 20} MiB or short)")
        return out

    # -- the loop --------------------------------------------------------------------------
    def _serve(self) -> None:
        while not self._stop.is_set():
            events = self._sel.select(timeout=0.05)
            for key, _ in events:
                if key.data is None:
                    self._accept()
                else:
                    self._read(key.data)
            if not events and not self._conns and self._draining.is_set():
                return

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            pid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                      struct.calcsize("3i")))[0]
            sock.setblocking(False)
            c = _Conn(sock=sock, pid=pid)
            self._conns[sock.fileno()] = c
            self._sel.register(sock, selectors.EVENT_READ, c)

    def _read(self, c: _Conn) -> None:
        try:
            data = c.sock.recv(READ_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._close(c, eof=True)
            return
        if c.mode == "hello":
            c.buf += data
            nl = c.buf.find(b"\n")
            if nl < 0:
                if len(c.buf) > HELLO_MAX:
                    self.bad_hellos += 1
                    self._close(c, eof=False)
                return
            hello, rest = bytes(c.buf[:nl]), bytes(c.buf[nl + 1:])
            c.buf = bytearray()
            if not self._open(c, hello):
                self._close(c, eof=False)
                return
            data = rest
            if not data:
                return
        if c.mode == "records":
            self._records(c, data)
        elif c.mode == "bytes":
            self._bytes(c, data)
        elif c.mode == "file":
            self._file(c, data)
        else:  # refused: read and discard until the peer goes
            pass

    # -- modes -----------------------------------------------------------------------------
    def _open(self, c: _Conn, raw: bytes) -> bool:
        try:
            hello = json.loads(raw)
            mode, name = hello["mode"], str(hello.get("name", ""))
            ok = hello.get("v") == VERSION and (
                mode in ("records", "settings") or (mode == "bytes" and name in BYTE_STREAMS)
                or (mode == "file" and FILE_NAME.match(name) and isinstance(hello.get("size"), int)))
        except (ValueError, KeyError, TypeError):
            ok = False
        if not ok:
            self.bad_hellos += 1
            return False
        peer = self.identify(c.pid)
        if peer is None:
            self.refused_peers += 1
            if len(self.refused_examples) < EXAMPLES:
                self.refused_examples.append({"pid": c.pid, "cmdline": cmdline(c.pid)})
            return False
        stats = self.ranks.setdefault(peer.rank, RankStats())
        open_now = sum(1 for o in self._conns.values() if o.peer is not None and o.peer.rank == peer.rank)
        if open_now >= self.limits.connections:
            stats.refused_connections += 1
            return False
        stats.connections += 1
        c.peer, c.mode, c.name = peer, mode, name
        rdir = rundir.rank_dir(self.run_dir, peer.rank)
        rdir.mkdir(parents=True, exist_ok=True)
        if mode == "settings":  # the run's settings, to a rank of this run only; then nothing more
            c.mode = "refused"
            self._reply(c, json.dumps(self.settings).encode() + b"\n")
        elif mode == "records":
            dropped = hello.get("dropped", 0)
            stats.dropped_by_rank += dropped if isinstance(dropped, int) and dropped > 0 else 0
        elif mode == "bytes":
            c.fh = self._file_handle(peer.rank, name)
        else:
            c.size = hello["size"]
            if not 0 <= c.size <= self.limits.file_bytes:
                stats.refused_files.append(name)
                c.mode = "refused"
                self._reply(c, b"refused\n")
                return True
            c.part = rdir / f".{name}.part{os.getpid()}.{c.sock.fileno()}"
            c.fh = open(c.part, "wb")
        return True

    def _records(self, c: _Conn, data: bytes) -> None:
        stats = self.ranks[c.who.rank]
        out: dict[str, list[str]] = {}
        start = 0
        while True:
            nl = data.find(b"\n", start)
            if nl < 0:
                tail = data[start:]
                if c.skipping:
                    return
                if len(c.buf) + len(tail) > self.limits.line_bytes:
                    stats.oversize_lines += 1
                    c.buf, c.skipping = bytearray(), True
                else:
                    c.buf += tail
                break
            piece = data[start:nl]
            start = nl + 1
            if c.skipping:
                c.skipping = False
                continue
            if c.buf:
                piece, c.buf = bytes(c.buf) + piece, bytearray()
            if len(piece) > self.limits.line_bytes:
                stats.oversize_lines += 1
                continue
            self._record(c, stats, piece, out)
        for stream, lines in out.items():
            self._file_handle(c.who.rank, stream).write("".join(lines).encode())

    def _record(self, c: _Conn, stats: RankStats, line: bytes, out: dict[str, list[str]]) -> None:
        if stats.record_bytes + len(line) > self.limits.records_bytes:
            stats.over_cap_bytes += len(line) + 1
            return
        try:
            msg = json.loads(line)
            stream, rec = msg["s"], msg["r"]
            if stream not in RECORD_STREAMS or not isinstance(rec, dict) or "mac" in rec:
                raise ValueError(stream)
        except (ValueError, KeyError, TypeError):
            stats.bad_lines += 1
            return
        # The attempt is the process's, as the parent attributed it, whatever the record says: a
        # claim of another one (an int, a float, a string) is kept beside it and counted.
        key = "a" if "a" in rec and "attempt" not in rec else "attempt"
        claimed = rec.get(key)
        if claimed is not None and (type(claimed) is not int or claimed != c.who.attempt):
            stats.attempt_mismatch += 1
            rec["claimed_attempt"] = claimed
        rec[key] = c.who.attempt
        now = time.time()
        rec["rt"] = round(now, 6)
        t = rec.get("t")
        if stream in TIMED_STREAMS and isinstance(t, (int, float)) and not isinstance(t, bool):
            lag = now - float(t)
            if lag > LATE_S:
                stats.late += 1
                stats.worst_lag_s = max(stats.worst_lag_s, round(lag, 3))
            elif lag < -AHEAD_S:
                stats.ahead += 1
        if rec.get("kind") in ("boot", "start") and stream == rundir.EVENTS:
            # the rank's process as the parent identified it, whoever sent the record: a child of the
            # script that sends a start record must not become the process the parent watches and kills
            rec["ns_pid"], rec["pid"] = rec.get("pid"), c.who.pid
            if c.pid != c.who.pid:
                rec["sender_pid"] = c.pid
                stats.foreign_starts += 1
        stats.records += 1
        stats.record_bytes += len(line) + 1
        out.setdefault(stream, []).append(rundir.sign(rec, self.key) + "\n")

    def _bytes(self, c: _Conn, data: bytes) -> None:
        stats = self.ranks[c.who.rank]
        have = stats.log_bytes.get(c.name, 0)
        room = self.limits.log_bytes - have
        if room > 0:
            c.sink.write(data[:room])
            stats.log_bytes[c.name] = have + min(room, len(data))
        if len(data) > max(room, 0):
            if c.name not in stats.log_dropped:
                c.sink.write(f"\n[trainwreck: {c.name} truncated at {self.limits.log_bytes >> 20} MiB; "
                           "the rest was dropped]\n".encode())
                stats.log_dropped[c.name] = 0
            stats.log_dropped[c.name] += len(data) - max(room, 0)

    def _file(self, c: _Conn, data: bytes) -> None:
        c.got += len(data)
        if c.got > c.size:
            self.ranks[c.who.rank].refused_files.append(c.name)
            c.sink.close()
            c.staged.unlink(missing_ok=True)
            c.fh, c.mode = None, "refused"
            self._reply(c, b"refused\n")
            return
        c.sink.write(data)

    # -- ends ------------------------------------------------------------------------------
    def _close(self, c: _Conn, eof: bool) -> None:
        if c.mode == "records" and (c.buf or c.skipping):
            self.ranks[c.who.rank].torn += 1
        if c.mode == "file" and c.fh is not None:
            c.fh.close()
            stats = self.ranks[c.who.rank]
            if eof and c.got == c.size:
                final = rundir.rank_dir(self.run_dir, c.who.rank) / c.name
                os.replace(c.staged, final)
                stats.files[c.name] = c.got
                self._reply(c, b"ok\n")
            else:
                c.staged.unlink(missing_ok=True)
                stats.torn += 1
                self._reply(c, b"refused\n")
        self._conns.pop(c.sock.fileno(), None)
        try:
            self._sel.unregister(c.sock)
        except (KeyError, ValueError):
            pass
        c.sock.close()

    def _reply(self, c: _Conn, msg: bytes) -> None:
        try:
            c.sock.send(msg)
        except OSError:
            pass

    def _file_handle(self, rank: int, name: str) -> BinaryIO:
        fh = self._files.get((rank, name))
        if fh is None:
            fh = open(rundir.rank_dir(self.run_dir, rank) / name, "ab", buffering=0)
            self._files[(rank, name)] = fh
        return fh
