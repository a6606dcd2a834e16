"""The artifact store reached as production code reaches S3 (harness/store_relay.py,
harness/store_s3.py): plain ``urllib`` requests at ``AWS_ENDPOINT_URL_S3`` go through the agent's
relay to the service outside, which times, publishes and logs them as it does its own client's."""

from __future__ import annotations

import hashlib
import os
import time
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET

import pytest

from harness import rundir, store_relay
from harness.store_s3 import ENDPOINT_ENV, NS, parse_target
from harness.store_service import KEPT_DIR, LOG, StoreConfig, start

MIB = 2**20


@pytest.fixture
def endpoint(tmp_path):
    """A store at 8 MiB/s behind a relay; yields (endpoint URL, work dir, records())."""
    run, work = tmp_path / "run", tmp_path / "run" / "work"
    work.mkdir(parents=True)
    key = rundir.new_key()
    svc = start(StoreConfig(root="artifacts", mib_per_s=8.0, bucket="ckpts", keep_copies=True), run, key, work)
    lsock, url = store_relay.start(svc.socket_path)
    yield url, work, lambda: rundir.read_records(run / LOG, key)
    lsock.close()
    svc.stop()


def _call(method: str, url: str, data: bytes | None = None, headers: dict | None = None):
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def test_urllib_puts_lists_gets_and_deletes_through_the_relay_at_the_services_rate(endpoint):
    url, work, records = endpoint
    body = os.urandom(MIB)
    t0 = time.time()
    status, headers, _ = _call("PUT", f"{url}/ckpts/ckpt-000050.pt", body, {"Content-Length": str(len(body))})
    assert status == 200 and headers["ETag"] == f'"{hashlib.md5(body).hexdigest()}"'
    assert time.time() - t0 >= 1 / 8.0 * 0.98  # the service's link, not the relay's loopback
    assert (work / "artifacts" / "ckpt-000050.pt").read_bytes() == body
    (put,) = [r for r in records().valid if r["kind"] == "put"]
    assert put["status"] == "ok" and put["sha256"] == hashlib.sha256(body).hexdigest()
    # the service's own copy of what it received, in the run dir: what the object held, even after
    # the object is deleted below
    assert (work.parent / KEPT_DIR / put["kept"]).read_bytes() == body

    status, _, listing = _call("GET", f"{url}/ckpts?list-type=2&prefix=ckpt-")
    root = ET.fromstring(listing)
    assert status == 200 and [k.text for k in root.iter(f"{{{NS}}}Key")] == ["ckpt-000050.pt"]
    assert root.findtext(f"{{{NS}}}Contents/{{{NS}}}Size") == str(MIB)
    assert _call("GET", f"{url}/ckpts/ckpt-000050.pt")[2] == body
    assert _call("HEAD", f"{url}/ckpts/ckpt-000050.pt")[1]["Content-Length"] == str(MIB)
    assert _call("DELETE", f"{url}/ckpts/ckpt-000050.pt")[0] == 204
    assert _call("DELETE", f"{url}/ckpts/ckpt-000050.pt")[0] == 204  # as S3 answers a missing key
    assert not (work / "artifacts" / "ckpt-000050.pt").exists()
    assert (work.parent / KEPT_DIR / put["kept"]).read_bytes() == body
    status, _, err = _call("GET", f"{url}/ckpts/ckpt-000050.pt")
    assert status == 404 and ET.fromstring(err).findtext("Code") == "NoSuchKey"


@pytest.mark.parametrize("path,code,s3code", [
    ("/other-bucket/x.pt", 404, "NoSuchBucket"),
    ("/ckpts/sub/x.pt", 400, "InvalidArgument"),
    ("/ckpts/.hidden", 400, "InvalidArgument"),
])
def test_requests_the_store_cannot_serve_get_s3_errors_and_leave_nothing(endpoint, path, code, s3code):
    url, work, records = endpoint
    status, _, err = _call("PUT", url + path, b"abc", {"Content-Length": "3"})
    assert (status, ET.fromstring(err).findtext("Code")) == (code, s3code)
    assert os.listdir(work / "artifacts") == []
    assert [r["status"] for r in records().valid if r["kind"] == "put"] == ["refused"]


def test_a_chunked_upload_is_refused_with_the_fix(endpoint):
    url, work, _ = endpoint

    def body():
        yield b"abc"

    status, _, err = _call("PUT", f"{url}/ckpts/x.pt", body())  # urllib sends an iterable chunked
    assert status == 411 and b"Content-Length" in err


def test_the_relay_exports_nothing_without_a_store_and_the_address_with_one(monkeypatch, endpoint):
    monkeypatch.delenv("TRAINWRECK_STORE", raising=False)
    monkeypatch.delenv(ENDPOINT_ENV, raising=False)
    assert store_relay.export() is None and ENDPOINT_ENV not in os.environ


def test_targets_parse_as_s3_paths():
    assert parse_target("/b/k.pt") == parse_target("/b/k.pt?x=1")
    t = parse_target("/b?list-type=2&prefix=ckpt-")
    assert (t.bucket, t.key, t.prefix) == ("b", None, "ckpt-")
    assert parse_target("/").bucket is None
