"""The kit's own client of the artifact store service the parent runs for each launch
(``harness.store_service``), over the service's Unix socket: what ``harness.workloads.ArtifactStore``
uses, so that an upload is traced with the service's receipt. Scripts reach the same service
the way production code reaches S3, over HTTP at ``AWS_ENDPOINT_URL_S3`` (``harness.store_relay``);
the wire format is S3's (``harness.store_s3``).

The service reads an upload's body at the link's rate and only then publishes the object and
answers, so an upload takes as long as the link needs for its bytes whatever the client does; the
client cannot ask for another rate.

``TRAINWRECK_STORE`` holds the socket's path as the rank sees it, ``TRAINWRECK_STORE_ROOT`` the
folder the service stores objects in (absolute), ``TRAINWRECK_STORE_BUCKET`` its bucket. None is
set outside a launch that runs a store: ``harness.workloads.ArtifactStore`` then works on a local
folder by itself.

HTTP/1.0, one request per connection, written here rather than with ``http.client`` so that a
refusal the server sends while the body is still going out (an object over the size cap) is read
and reported instead of surfacing as a broken pipe.
"""

from __future__ import annotations

import base64
import os
import socket
from dataclasses import dataclass
from typing import Any

from harness.store_s3 import DEFAULT_BUCKET, KEY_RULE, error_message, listed_keys, valid_key

STORE_ENV = "TRAINWRECK_STORE"  # the service's socket, as the rank sees it
ROOT_ENV = "TRAINWRECK_STORE_ROOT"  # where the service keeps the objects (absolute)
BUCKET_ENV = "TRAINWRECK_STORE_BUCKET"  # the one bucket it serves
SOCKET_NAME = "store.sock"
ID_HEADER = "X-Trainwreck-Upload"
CHUNK = 1 << 16
TIMEOUT_S = 600.0  # a whole request; an upload of 256 MiB at 1 MiB/s takes 256 s


class StoreError(OSError):
    """The store refused a request or could not be reached; the message says which and why."""


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes


def active() -> bool:
    return bool(os.environ.get(STORE_ENV))


def service_root() -> str | None:
    root = os.environ.get(ROOT_ENV)
    return os.path.realpath(root) if root else None


class StoreClient:
    def __init__(self, socket_path: str | None = None, timeout_s: float = TIMEOUT_S):
        self.path = socket_path or os.environ.get(STORE_ENV) or ""
        if not self.path:
            raise StoreError(f"{STORE_ENV} is not set: this launch runs no artifact store")
        self.timeout_s = timeout_s
        self.bucket = os.environ.get(BUCKET_ENV) or DEFAULT_BUCKET

    # -- requests ---------------------------------------------------------------------------
    def _connect(self) -> socket.socket:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout_s)
        try:
            s.connect(self.path)
        except OSError as e:
            s.close()
            raise StoreError(f"the artifact store at {self.path} cannot be reached: {e.strerror or e}") from None
        return s

    def request(self, method: str, target: str, body: bytes | None = None, file: Any = None,
                size: int | None = None) -> Response:
        """One request. The body is ``body`` or ``size`` bytes read from the open ``file``."""
        s = self._connect()
        try:
            n = len(body) if body is not None else (size or 0)
            head = f"{method} {target} HTTP/1.0\r\nHost: store\r\nContent-Length: {n}\r\n\r\n"
            sent_all = True
            try:
                s.sendall(head.encode())
                if body:
                    s.sendall(body)
                elif file is not None:
                    left = n
                    while left > 0:
                        chunk = file.read(min(CHUNK, left))
                        if not chunk:
                            raise StoreError(f"the file ended {left} bytes before its size said")
                        s.sendall(chunk)
                        left -= len(chunk)
            except (BrokenPipeError, ConnectionResetError):
                sent_all = False  # the server answered early (a refusal) and closed: read it
            return _read_response(s, method, sent_all)
        finally:
            s.close()

    def put(self, src: str, name: str) -> dict[str, Any]:
        """Upload the file ``src`` as object ``name``: returns the server's receipt (``id``,
        ``bytes``, ``sha256``)."""
        if not valid_key(name):
            raise StoreError(f"object name {name!r}: {KEY_RULE}")
        with open(src, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            r = self.request("PUT", f"/{self.bucket}/{name}", file=f, size=size)
        if r.status != 200:
            raise StoreError(f"the artifact store refused {name!r} ({r.status}): {error_message(r.body)}")
        digest = base64.b64decode(r.headers.get("x-amz-checksum-sha256", "")).hex()
        return {"id": int(r.headers.get(ID_HEADER.lower(), "0")), "bytes": size, "sha256": digest}

    def get(self, name: str) -> bytes:
        r = self.request("GET", f"/{self.bucket}/{name}")
        if r.status != 200:
            raise StoreError(f"GET {name!r} from the artifact store: {r.status} {error_message(r.body)}")
        return r.body

    def list(self) -> list[str]:
        r = self.request("GET", f"/{self.bucket}?list-type=2")
        if r.status != 200:
            raise StoreError(f"listing the artifact store: {r.status} {error_message(r.body)}")
        return listed_keys(r.body)

    def delete(self, name: str) -> None:
        r = self.request("DELETE", f"/{self.bucket}/{name}")
        if r.status not in (200, 204):
            raise StoreError(f"DELETE {name!r} from the artifact store: {r.status} {error_message(r.body)}")


def _read_response(s: socket.socket, method: str, sent_all: bool) -> Response:
    buf = bytearray()
    while b"\r\n\r\n" not in buf:
        try:
            chunk = s.recv(CHUNK)
        except (ConnectionResetError, BrokenPipeError):
            chunk = b""
        if not chunk:
            what = "before the whole body was sent" if not sent_all else "without an answer"
            raise StoreError(f"the artifact store closed the connection {what}")
        buf += chunk
        if len(buf) > 1 << 16:
            raise StoreError("the artifact store's answer has no end of headers")
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    try:
        status = int(lines[0].split()[1])
    except (IndexError, ValueError):
        raise StoreError(f"the artifact store answered {lines[0][:80]!r}") from None
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    n = int(headers.get("content-length", "0") or 0)
    body = bytearray(rest)
    while len(body) < n:
        try:
            chunk = s.recv(min(CHUNK, n - len(body)))
        except (ConnectionResetError, BrokenPipeError):
            break
        if not chunk:
            break
        body += chunk
    return Response(status, headers, bytes(body[:n]))
