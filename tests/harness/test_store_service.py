"""The artifact store as a service outside the ranks (harness/store_service.py) and its client
(harness/store_client.py, harness.workloads.ArtifactStore): the link's rate is the server's, shared
by every connection; an upload is published whole or not at all; refusals, aborted uploads and
files that reach the folder another way are in the server's signed log.

Only lower bounds on time are asserted (the server must wait at least the bytes over the rate);
how much longer a loaded machine takes is not a property of the store."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
import time
from pathlib import Path

import pytest

from harness import rundir, store_client
from harness.errors import LaunchError
from harness.store_client import StoreClient, StoreError
from harness.store_service import KEPT_DIR, LOG, StoreConfig, start
from harness.workloads import ArtifactStore

MIB = 2**20


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A running store for a run dir under tmp_path; yields (service, work dir, key, records())."""
    run, work = tmp_path / "run", tmp_path / "run" / "work"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)  # the script's working dir, as under a launch
    key = rundir.new_key()
    made = []

    def make(**cfg):
        svc = start(StoreConfig(**{"root": "artifacts", "mib_per_s": 8.0, "keep_copies": True, **cfg}), run, key, work)
        made.append(svc)
        for k, v in svc.env().items():
            monkeypatch.setenv(k, v)
        return svc

    def records():
        return rundir.read_records(run / LOG, key)

    yield make, work, records
    for svc in made:
        svc.stop()


def _file(path: Path, n: int) -> Path:
    path.write_bytes(os.urandom(n))
    return path


def _puts(records, **match):
    return [r for r in records().valid if r["kind"] == "put" and all(r.get(k) == v for k, v in match.items())]


def test_an_upload_takes_its_bytes_over_the_servers_rate_whatever_the_client_asks(store):
    make, work, records = store
    make(mib_per_s=6.0)
    src = _file(work / "ckpt.pt", 3 * MIB // 2)
    t0 = time.time()
    dst = ArtifactStore("artifacts", mb_per_s=1e9).upload(str(src), "ckpt-1.pt")  # the client's rate is ignored
    took = time.time() - t0
    need = 1.5 / 6.0
    assert took >= need * 0.98, took
    (put,) = _puts(records, status="ok")
    assert put["t1"] - put["t0"] >= need * 0.98 and put["bytes"] == 3 * MIB // 2
    assert put["sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()
    assert Path(dst).read_bytes() == src.read_bytes() and put["pid"] == os.getpid()
    assert ArtifactStore("artifacts").list() == ["ckpt-1.pt"]


def test_concurrent_uploads_share_one_link(store):
    make, work, records = store
    make(mib_per_s=8.0)
    srcs = [_file(work / f"c{i}.pt", MIB) for i in range(2)]
    client = StoreClient()
    errors = []

    def up(i):
        try:
            client.put(str(srcs[i]), f"c{i}.pt")
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=up, args=(i,)) for i in range(2)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.time() - t0
    assert not errors
    assert took >= 2 / 8.0 * 0.98, took  # two MiB over one 8 MiB/s link, not two links
    puts = _puts(records, status="ok")
    assert sorted(p["name"] for p in puts) == ["c0.pt", "c1.pt"]
    for i in range(2):
        assert (work / "artifacts" / f"c{i}.pt").read_bytes() == srcs[i].read_bytes()


def test_a_client_that_disconnects_mid_upload_leaves_no_object(store):
    make, work, records = store
    svc = make(mib_per_s=8.0)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(svc.socket_path)
    s.sendall(f"PUT /checkpoints/half.pt HTTP/1.0\r\nContent-Length: {MIB}\r\n\r\n".encode() + b"x" * 65536)
    time.sleep(0.2)
    s.close()
    deadline = time.time() + 30
    while not _puts(records, name="half.pt") and time.time() < deadline:
        time.sleep(0.1)
    (put,) = _puts(records, name="half.pt")
    assert put["status"] == "aborted" and put["bytes"] < MIB and put["declared"] == MIB
    assert "closed the connection" in put["why"]
    assert os.listdir(work / "artifacts") == []  # neither the object nor its partial file
    assert os.listdir(work.parent / KEPT_DIR) == []  # nor the service's copy of it
    assert StoreClient().list() == []


def test_an_object_over_the_size_cap_is_refused_before_its_body_is_read(store):
    make, work, records = store
    make(mib_per_s=1.0, max_object_mib=1.0)
    src = _file(work / "big.pt", 2 * MIB)
    t0 = time.time()
    with pytest.raises(StoreError, match=r"refused 'big.pt' \(413\): EntityTooLarge: 2097152 bytes is over the store's limit"):
        ArtifactStore("artifacts").upload(str(src), "big.pt")
    assert time.time() - t0 < 2.0 / 1.0  # not read at 1 MiB/s first
    (put,) = _puts(records, name="big.pt")
    assert put["status"] == "refused" and put["code"] == 413 and put["bytes"] == 0
    assert os.listdir(work / "artifacts") == []


@pytest.mark.parametrize("name", ["../escape.pt", ".hidden", "a/b.pt", ""])
def test_names_that_are_not_plain_object_names_are_refused(store, name):
    make, work, records = store
    svc = make()
    src = _file(work / "x.pt", 100)
    with pytest.raises(StoreError):
        StoreClient().put(str(src), name)
    r = StoreClient(svc.socket_path).request("PUT", f"/checkpoints/{name}", body=b"abc")
    assert r.status == 400 and b"a key is letters, digits" in r.body, (r.status, r.body)  # the name rule, not a missing path
    assert not (work / "escape.pt").exists() and not (work.parent / "escape.pt").exists()


def test_delete_list_and_get_go_through_the_service(store):
    make, work, records = store
    make(mib_per_s=50.0)
    st = ArtifactStore("artifacts")
    for i in range(4):
        st.upload(str(_file(work / "c.pt", 1000)), f"ckpt-{i}.pt")
    for old in st.list()[:-2]:
        st.delete(old)
    assert st.list() == ["ckpt-2.pt", "ckpt-3.pt"]
    assert StoreClient().get("ckpt-3.pt") == (work / "c.pt").read_bytes()
    st.delete("ckpt-0.pt")  # gone already: S3 answers 204 all the same, the log says "missing"
    deletes = [r for r in records().valid if r["kind"] == "delete"]
    assert [d["status"] for d in deletes] == ["ok", "ok", "missing"]
    assert [r["kind"] for r in records().valid].count("list") == 2


def test_the_last_record_names_files_that_reached_the_folder_another_way(store):
    make, work, records = store
    svc = make(mib_per_s=50.0)
    st = ArtifactStore("artifacts")
    st.upload(str(_file(work / "c.pt", 1000)), "ckpt-1.pt")
    (work / "artifacts" / "by-hand.pt").write_bytes(b"copied in")
    (work / "artifacts" / "ckpt-1.pt").write_bytes(b"overwritten after the upload")
    summary = svc.stop()
    assert summary["foreign_count"] == 1 and summary["changed"] == ["ckpt-1.pt"]
    stop = [r for r in records().valid if r["kind"] == "store_stop"][-1]
    assert stop["foreign"] == [{"name": "by-hand.pt", "bytes": 9, "kind": "file"}]
    assert stop["changed"] == ["ckpt-1.pt"] and stop["root_replaced"] is False


def test_the_log_is_signed_and_a_line_written_into_it_is_forged(store):
    make, work, records = store
    svc = make(mib_per_s=50.0)
    ArtifactStore("artifacts").upload(str(_file(work / "c.pt", 1000)), "ckpt-1.pt")
    svc.stop()
    log = work.parent / LOG
    with open(log, "a") as f:
        f.write(json.dumps({"kind": "put", "status": "ok", "name": "fake.pt", "mac": "0" * 32}) + "\n")
    recs = records()
    assert recs.forged == 1 and [r["kind"] for r in recs.valid] == ["store_start", "put", "store_stop"]


def test_a_store_root_that_leads_outside_the_working_dir_does_not_start(tmp_path):
    work = tmp_path / "run" / "work"
    work.mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (work / "artifacts").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(LaunchError, match="the artifact store did not start"):
        start(StoreConfig(root="artifacts", mib_per_s=8.0), tmp_path / "run", rundir.new_key(), work)


@pytest.mark.parametrize("root", ["/abs", "../up", ""])
def test_a_store_root_outside_the_working_dir_is_refused_in_the_config(root):
    with pytest.raises(LaunchError, match="store root"):
        StoreConfig(root=root, mib_per_s=1.0).validate()


def test_an_artifact_store_at_another_folder_than_the_services_says_so(store):
    make, work, records = store
    make()
    with pytest.raises(ValueError, match="keeps its objects in .*artifacts; give that folder"):
        ArtifactStore(str(work / "elsewhere")).upload(str(_file(work / "c.pt", 10)), "c.pt")


def test_without_a_service_the_store_is_a_local_folder_at_the_clients_rate(tmp_path, monkeypatch):
    monkeypatch.delenv(store_client.STORE_ENV, raising=False)
    monkeypatch.delenv(store_client.ROOT_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    st = ArtifactStore("artifacts", mb_per_s=4.0)
    t0 = time.time()
    st.upload(str(_file(tmp_path / "c.pt", MIB)), "ckpt-1.pt")
    assert time.time() - t0 >= 0.25 * 0.98
    assert st.list() == ["ckpt-1.pt"]
    st.delete("ckpt-1.pt")
    assert st.list() == []


def test_copies_of_watched_versions_are_shared_on_disk_and_others_kept(tmp_path):
    """After a launch, a copy the store kept with the bytes of a version the file watch kept becomes
    a hard link to it; a copy of bytes nobody watched stays its own file; a forged record is ignored."""
    from harness.filewatch import KEPT_DIR as WATCHED
    from harness.filewatch import LOG as WATCH_LOG
    from harness.store_service import share_copies

    key = rundir.new_key()
    same, other = os.urandom(5000), os.urandom(3000)
    (tmp_path / WATCHED).mkdir()
    (tmp_path / WATCHED / "000001.bin").write_bytes(same)
    (tmp_path / KEPT_DIR).mkdir()
    for name, data in (("000001.bin", same), ("000002.bin", other), ("000003.bin", same)):
        (tmp_path / KEPT_DIR / name).write_bytes(data)
    w = rundir.RecordWriter(tmp_path / WATCH_LOG, key)
    w.write({"kind": "version", "path": "out/ckpt.pt", "kept": "000001.bin", "sha256": hashlib.sha256(same).hexdigest()})
    w.close()
    s = rundir.RecordWriter(tmp_path / LOG, key)
    s.write({"kind": "put", "status": "ok", "kept": "000001.bin", "sha256": hashlib.sha256(same).hexdigest()})
    s.write({"kind": "put", "status": "ok", "kept": "000002.bin", "sha256": hashlib.sha256(other).hexdigest()})
    s.close()
    with open(tmp_path / LOG, "a") as f:  # not signed: not the store's
        f.write(json.dumps({"kind": "put", "kept": "000003.bin", "sha256": hashlib.sha256(same).hexdigest()}) + "\n")
    assert share_copies(tmp_path, key) == 5000
    kept = tmp_path / KEPT_DIR
    assert os.path.samefile(kept / "000001.bin", tmp_path / WATCHED / "000001.bin")
    assert (kept / "000001.bin").read_bytes() == same and (kept / "000002.bin").read_bytes() == other
    assert (kept / "000002.bin").stat().st_nlink == 1 and (kept / "000003.bin").stat().st_nlink == 1
    assert sorted(os.listdir(kept)) == ["000001.bin", "000002.bin", "000003.bin"]
    assert share_copies(tmp_path, key) == 0  # shared already
