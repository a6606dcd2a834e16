"""The channel: records, logs and files leave a rank over a socket the parent owns; the parent
attributes each connection from outside, signs, stores, caps and counts. Most tests run the server
in this process with this process as the "rank"; the last one runs a hostile rank in a sandbox."""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from harness import channel, rundir, sandbox
from harness.channel_server import ChannelServer, ServerLimits
from tests.conftest import assert_nothing_left
from tests.harness.sandboxed import run_sandboxed


@dataclass(frozen=True)
class Peer:
    rank: int
    attempt: int
    pid: int


def ours(pid: int) -> Peer | None:
    """This test process and its children are rank 0, attempt 0; anything else is no rank."""
    me = os.getpid()
    try:
        is_ours = pid == me or psutil.Process(pid).ppid() == me
    except psutil.Error:
        is_ours = False
    return Peer(0, 0, pid) if is_ours else None


@pytest.fixture(autouse=True)
def fresh_sender(monkeypatch):
    """The rank side keeps one connection per process; each test starts without one."""
    sender = channel._Sender()
    monkeypatch.setattr(channel, "_sender", sender)
    yield
    sender.close()


@pytest.fixture
def server(tmp_path, monkeypatch):
    made = []

    def make(limits: ServerLimits = ServerLimits(), identify=ours) -> ChannelServer:
        s = ChannelServer(tmp_path / "run", "k" * 32, identify, limits).start()
        monkeypatch.setenv(channel.CHANNEL_ENV, str(s.path))
        made.append(s)
        return s

    yield make
    for s in made:
        if s._thread.is_alive():
            s.stop(drain_s=1)


def raw(path: Path, data: bytes) -> None:
    s = socket.socket(socket.AF_UNIX)
    s.connect(str(path))
    s.sendall(data)
    s.close()


def hello(mode: str = "records", **kw) -> bytes:
    return json.dumps({"v": 1, "mode": mode, **kw}).encode() + b"\n"


def stored(tmp_path: Path, name: str = rundir.EVENTS) -> rundir.Records:
    return rundir.read_records(rundir.rank_dir(tmp_path / "run", 0) / name, "k" * 32)


def settle(srv: ChannelServer) -> dict:
    channel._sender.close()
    return srv.stop(drain_s=5)


def test_records_are_signed_by_the_parent_with_its_receive_time(server, tmp_path):
    srv = server()
    w = channel.RecordWriter(Path("/anywhere/ranks/0") / rundir.EVENTS, key="ignored")
    w.write({"kind": "boot", "attempt": 0, "t": time.time(), "pid": 12345, "rank": 0})
    w.write({"kind": "step", "attempt": 0, "step": 1})
    channel.RecordWriter(rundir.SAMPLES).write({"a": 0, "ds": "d", "i": 3, "s": 0})
    stats = settle(srv)
    ev = stored(tmp_path)
    assert ev.forged == 0 and [r["kind"] for r in ev.valid] == ["boot", "step"]
    assert all(r["rt"] > 1e9 for r in ev.valid)
    assert ev.valid[0]["pid"] == os.getpid() and ev.valid[0]["ns_pid"] == 12345  # the parent's view
    assert stored(tmp_path, rundir.SAMPLES).valid[0]["i"] == 3
    assert stats["tampering"] == [] and stats["ranks"]["0"]["records"] == 3


def test_a_start_sent_from_under_the_rank_names_the_rank_s_process_not_the_sender(server, tmp_path):
    """A child of the script that sends a start record must not become the process the parent
    watches and kills: the record carries the rank's pid as the parent identified it, the sender's
    beside it, and the server counts it as tampering."""
    srv = server(identify=lambda pid: Peer(0, 0, 4242))  # this process sits under rank 0, whose pid is 4242
    channel.RecordWriter(Path("/anywhere/ranks/0") / rundir.EVENTS).write(
        {"kind": "start", "attempt": 0, "t": time.time(), "pid": 7, "rank": 0})
    stats = settle(srv)
    rec = stored(tmp_path).valid[0]
    assert (rec["pid"], rec["sender_pid"], rec["ns_pid"]) == (4242, os.getpid(), 7)
    assert stats["tampering"] == ["rank 0: 1 boot or start records sent by a process under the rank, not the rank "
                                  "itself"]


@pytest.mark.parametrize("line, counter", [
    (b"not json", "bad_lines"),
    (b'{"s": "../../run.json", "r": {"kind": "x"}}', "bad_lines"),
    (b'{"s": "events.jsonl", "r": [1, 2]}', "bad_lines"),
    (b'{"s": "events.jsonl", "r": {"kind": "step", "mac": "00"}}', "bad_lines"),
    (b'{"r": {"kind": "step"}}', "bad_lines"),
    (b'{"s": "events.jsonl", "r": {"kind": "step", "attempt": 3}}', "attempt_mismatch"),
    (b'{"s": "events.jsonl", "r": {"kind": "' + b"x" * 2000 + b'"}}', "oversize_lines"),
])
def test_lines_that_are_no_honest_record_are_counted(server, tmp_path, line, counter):
    srv = server(ServerLimits(line_bytes=1000))
    raw(srv.path, hello() + line + b"\n")
    stats = settle(srv)
    assert stats["ranks"]["0"][counter] == 1
    assert stats["tampering"]
    kept = stored(tmp_path).valid
    assert kept == [] or counter == "attempt_mismatch"  # a wrong attempt is stored, and flagged


@pytest.mark.parametrize("offset, counter", [(-30.0, "late"), (5.0, "ahead"), (-0.2, None)])
def test_records_held_back_or_stamped_ahead_are_counted(server, tmp_path, offset, counter):
    srv = server()
    t = time.time() + offset
    raw(srv.path, hello() + json.dumps({"s": "events.jsonl", "r": {"kind": "step", "attempt": 0, "t": t}}).encode()
        + b"\n" + json.dumps({"s": "samples.jsonl", "r": {"a": 0, "t": t - 100}}).encode() + b"\n")
    stats = settle(srv)["ranks"]["0"]
    assert (stats["late"], stats["ahead"]) == {"late": (1, 0), "ahead": (0, 1), None: (0, 0)}[counter]
    if counter == "late":
        assert stats["worst_lag_s"] >= 30.0  # the samples stream carries no time of its own: not judged
    assert stored(tmp_path).valid[0]["t"] == t  # kept as the rank said it


@pytest.mark.parametrize("claim", [3, 1.0, "1", True])
def test_the_attempt_of_a_record_is_the_process_s_not_its_claim(server, tmp_path, claim):
    srv = server()
    raw(srv.path, hello() + json.dumps({"s": "events.jsonl", "r": {"kind": "step", "attempt": claim}}).encode()
        + b"\n" + b'{"s": "saves.jsonl", "r": {"a": 2, "seq": 1, "ph": "begin"}}\n')
    stats = settle(srv)
    assert stats["ranks"]["0"]["attempt_mismatch"] == 2
    ev, sv = stored(tmp_path).valid[0], stored(tmp_path, rundir.SAVES).valid[0]
    assert ev["attempt"] == 0 and ev["claimed_attempt"] == claim  # the process is in attempt 0
    assert sv["a"] == 0 and "attempt" not in sv


def test_a_connection_ending_inside_a_line_is_torn(server, tmp_path):
    srv = server()
    raw(srv.path, hello() + b'{"s": "events.jsonl", "r": {"kind": "st')
    assert settle(srv)["ranks"]["0"]["torn"] == 1


@pytest.mark.parametrize("first", [
    b"GET / HTTP/1.0\r\n\r\n",
    json.dumps({"v": 2, "mode": "records"}).encode() + b"\n",
    hello("bytes", name="../../run.json"),
    hello("bytes", name="events.jsonl"),
    hello("file", name="evil.py", size=3),
    hello("file", name="final_params.safetensors"),  # no size
    b"{" + b" " * 5000,  # no newline within the hello's 4 KiB
])
def test_a_bad_hello_is_refused_and_nothing_written(server, tmp_path, first):
    srv = server()
    raw(srv.path, first + b"payload\n")
    stats = settle(srv)
    assert stats["bad_hellos"] == 1 and stats["ranks"] == {}
    assert not (tmp_path / "run" / "ranks").exists()


def test_a_process_that_is_no_rank_is_refused(server, tmp_path):
    srv = server(identify=lambda pid: None)
    channel.RecordWriter(rundir.EVENTS).write({"kind": "step", "step": 99})
    stats = settle(srv)
    assert stats["refused_peers"] == 1 and stats["refused_examples"][0]["pid"] == os.getpid()
    assert "no rank" in stats["tampering"][0]
    assert not (tmp_path / "run" / "ranks").exists()


def test_a_record_flood_is_capped_and_the_parent_stays_small(server, tmp_path):
    srv = server(ServerLimits(records_bytes=64 << 10))
    me = psutil.Process()
    rss0 = me.memory_info().rss
    line = hello() + (b'{"s": "events.jsonl", "r": {"kind": "junk", "pad": "' + b"x" * 900 + b'"}}\n') * 4096
    for _ in range(16):  # 62 MB
        raw(srv.path, line)
    stats = settle(srv)
    r0 = stats["ranks"]["0"]
    assert r0["record_bytes"] <= 64 << 10 and r0["over_cap_bytes"] > 55 << 20
    assert (rundir.rank_dir(tmp_path / "run", 0) / rundir.EVENTS).stat().st_size < 128 << 10
    assert me.memory_info().rss - rss0 < 32 << 20


def test_a_log_past_its_cap_is_truncated_with_a_marker(server, tmp_path):
    srv = server(ServerLimits(log_bytes=1 << 20))
    s = channel.connect("bytes", rundir.STDOUT)
    for _ in range(3):
        s.sendall(b"y" * (1 << 20))
    s.close()
    stats = settle(srv)
    out = (rundir.rank_dir(tmp_path / "run", 0) / rundir.STDOUT).read_bytes()
    assert out.startswith(b"y" * (1 << 20)) and out.endswith(b"the rest was dropped]\n")
    assert stats["ranks"]["0"]["log_dropped"] == {rundir.STDOUT: 2 << 20}


@pytest.mark.parametrize("size, cap, stored_ok", [(5 << 20, 256 << 20, True), (4096, 1000, False)])
def test_files_travel_whole_or_not_at_all(server, tmp_path, size, cap, stored_ok):
    srv = server(ServerLimits(file_bytes=cap))
    data = os.urandom(size)
    if stored_ok:
        digest = channel.send_file(rundir.FINAL_PARAMS, data)
        assert digest == rundir.hashlib.sha256(data).hexdigest()
    else:
        with pytest.raises(OSError, match="did not store"):
            channel.send_file(rundir.FINAL_PARAMS, data)
    stats = settle(srv)
    path = rundir.rank_dir(tmp_path / "run", 0) / rundir.FINAL_PARAMS
    assert path.exists() == stored_ok and (not stored_ok or path.read_bytes() == data)
    assert not list(path.parent.glob(".*part*"))
    assert (rundir.FINAL_PARAMS in stats["ranks"]["0"]["refused_files"]) != stored_ok


def test_a_rank_gets_the_runs_settings_and_a_process_that_is_no_rank_gets_nothing(server, tmp_path):
    srv = server()
    srv.settings = {"TRAINWRECK_FAULTS": '[{"rank": 1, "step": 45}]', "TRAINWRECK_THREADS": "1"}
    assert channel.fetch_settings() == srv.settings
    settle(srv)
    stranger = server(identify=lambda pid: None)
    stranger.settings = {"TRAINWRECK_FAULTS": "[]"}
    with pytest.raises(OSError, match="sent no settings"):
        channel.fetch_settings(timeout_s=5)
    assert settle(stranger)["refused_peers"] == 1


def test_a_file_shorter_than_announced_is_dropped(server, tmp_path):
    srv = server()
    raw(srv.path, hello("file", name=rundir.FINAL_PARAMS, size=100) + b"z" * 50)
    stats = settle(srv)
    assert stats["ranks"]["0"]["torn"] == 1
    assert list(rundir.rank_dir(tmp_path / "run", 0).iterdir()) == []


def test_connections_per_rank_are_capped(server, tmp_path):
    srv = server(ServerLimits(connections=2))
    held = [channel.connect("bytes", rundir.STDOUT) for _ in range(2)]
    time.sleep(0.2)  # both accepted and attributed before the third arrives
    raw(srv.path, hello("bytes", name=rundir.STDERR) + b"x")
    time.sleep(0.2)
    for s in held:
        s.close()
    assert settle(srv)["ranks"]["0"]["refused_connections"] == 1


def test_a_stuck_parent_never_blocks_the_rank(tmp_path, monkeypatch):
    """A listener that never reads: the send timeout drops records, the write returns."""
    path = tmp_path / "stuck.sock"
    stuck = socket.socket(socket.AF_UNIX)
    stuck.bind(str(path))
    stuck.listen(1)
    monkeypatch.setenv(channel.CHANNEL_ENV, str(path))
    monkeypatch.setattr(channel, "SEND_TIMEOUT_S", 0.2)
    w = channel.RecordWriter(rundir.EVENTS)
    try:
        for i in range(2000):
            w.write({"kind": "junk", "i": i, "pad": "x" * 4000})
        assert channel.dropped() > 0
    finally:
        stuck.close()


def test_records_dropped_while_the_parent_was_away_are_reported(server, tmp_path, monkeypatch):
    monkeypatch.setattr(channel, "RETRY_AFTER_S", 0.0)
    monkeypatch.setenv(channel.CHANNEL_ENV, str(tmp_path / "nobody-listens"))
    w = channel.RecordWriter(rundir.EVENTS)
    for i in range(5):
        w.write({"kind": "lost", "i": i})
    srv = server()
    w.write({"kind": "step", "attempt": 0, "step": 1})
    stats = settle(srv)
    assert stats["ranks"]["0"]["dropped_by_rank"] == 5
    assert [r["kind"] for r in stored(tmp_path).valid] == ["step"]


def test_write_many_sends_a_batch_in_one_write_and_the_parent_signs_each_record(server, tmp_path):
    srv = server()
    w = channel.RecordWriter(rundir.COLLECTIVES)
    w.write({"a": 0, "seq": 0, "ph": "enter"})  # opens the connection
    sent: list[bytes] = []
    real = channel._sender._sock
    channel._sender._sock = _Spy(real.sendall, sent)
    w.write_many([{"a": 0, "seq": i, "ph": "exit"} for i in range(1, 4)])
    channel._sender._sock = real
    assert len(sent) == 1 and sent[0].count(b"\n") == 3
    settle(srv)
    recs = stored(tmp_path, rundir.COLLECTIVES)
    assert [r["seq"] for r in recs.valid] == [0, 1, 2, 3] and recs.forged == 0
    assert all("rt" in r for r in recs.valid)


class _Spy:
    """A socket's sendall, counted."""

    def __init__(self, sendall, sent):
        self._sendall, self._sent = sendall, sent

    def sendall(self, data):
        self._sent.append(data)
        return self._sendall(data)


def test_a_batch_that_cannot_be_sent_counts_every_record_dropped(tmp_path, monkeypatch):
    monkeypatch.setattr(channel, "RETRY_AFTER_S", 60.0)
    monkeypatch.setenv(channel.CHANNEL_ENV, str(tmp_path / "nobody-listens"))
    w = channel.RecordWriter(rundir.COLLECTIVES)
    w.write_many([{"a": 0, "seq": i} for i in range(4)])  # the connect fails
    w.write_many([{"a": 0, "seq": i} for i in range(4, 7)])  # within the retry pause
    assert channel.dropped() == 7


def test_a_forked_child_opens_its_own_connection(server, tmp_path):
    """A DataLoader worker is a fork: its records must not interleave with its parent's bytes."""
    srv = server()
    w = channel.RecordWriter(rundir.SAMPLES)
    w.write({"a": 0, "ds": "d", "i": -1, "s": 0})
    pid = os.fork()
    if pid == 0:
        try:
            for i in range(500):
                w.write({"a": 0, "ds": "d", "i": i, "s": 0, "pad": "c" * 200})
        finally:
            os._exit(0)
    for i in range(500, 1000):
        w.write({"a": 0, "ds": "d", "i": i, "s": 0, "pad": "p" * 200})
    os.waitpid(pid, 0)
    stats = settle(srv)
    got = stored(tmp_path, rundir.SAMPLES)
    assert got.forged == 0 and sorted(r["i"] for r in got.valid) == list(range(-1, 1000))
    assert stats["ranks"]["0"]["connections"] == 2 and stats["ranks"]["0"]["bad_lines"] == 0


@pytest.mark.skipif(not sandbox.probe().ok, reason="no sandbox here")
@pytest.mark.slow
def test_a_hostile_rank_cannot_pass_off_a_helper_as_a_rank(tmp_path):
    r = run_sandboxed(tmp_path, "channel_abuse.py", nproc=1)
    chan = json.loads((r.run_dir / "channel.json").read_text())
    # The daemon is refused, or ended as a stray before it could connect: a race, either is right.
    assert chan["refused_peers"] >= 1 or r.summary["strays"]
    assert chan["bad_hellos"] == 1  # the HTTP line
    r0 = chan["ranks"]["0"]
    assert r0["bad_lines"] == 4 and r0["oversize_lines"] == 1 and r0["attempt_mismatch"] == 1
    kinds = [rec.get("kind") for rec in r.records(0).valid]
    assert 999 not in [rec.get("step") for rec in r.records(0).valid]  # the daemon's step
    # What the script sends through the rank's own connection is signed like the bootstrap's:
    # in-process forging remains (docs/sandbox.md); it is flagged by nothing but its content.
    assert "note" in kinds and any(rec.get("forged") for rec in r.records(0).valid)
    assert_nothing_left(tmp_path)


def test_open_writer_picks_the_channel_only_under_a_sandboxed_launch(tmp_path, monkeypatch):
    monkeypatch.delenv(channel.CHANNEL_ENV, raising=False)
    w = channel.open_writer(tmp_path / "ranks" / "0" / rundir.EVENTS, "k")
    assert isinstance(w, rundir.RecordWriter)
    w.close()
    monkeypatch.setenv(channel.CHANNEL_ENV, str(tmp_path / "sock"))
    assert isinstance(channel.open_writer(tmp_path / rundir.EVENTS, "k"), channel.RecordWriter)
