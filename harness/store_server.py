"""The artifact store's server process (``python -m harness.store_server``), started by the parent
for one launch (``harness.store_service.start``): the S3 subset of ``harness.store_s3`` over a
Unix socket, one bucket, objects kept as files in ``root`` (under the script's working dir).

- **The link is the server's.** An upload's body is read at the modelled rate (every connection
  shares the one link, so parallel uploads get no more than the rate between them); the object is
  published and the request answered only once the last byte has crossed it. No client, and nothing
  a rank does to its own clock, changes the rate.
- **The log is the server's.** Every request is logged with the server's timestamps, sizes and the
  object's sha256 into ``<run_dir>/store.jsonl``, signed with the run key like every record the
  grader trusts; the run dir is the parent's (the sandbox never sees it).
- **So is a copy of each object.** What an upload carried is kept, as received, in
  ``<run_dir>/store-objects/`` (``kept`` in its record; up to ``KEPT_CAP`` for the launch), so the
  grader can tell what each object version held by content, however the script produced the bytes
  (a file it wrote, or bytes from memory), after the object itself was deleted or overwritten.
- **The folder is written safely.** Objects are written under a hidden partial name, then renamed,
  all through a directory fd opened without following links (the ranks can write in the working
  dir; a link planted there must not lead the server's writes elsewhere). When the launch ends the
  server lists the folder: files it never wrote there (copied in by hand), objects whose bytes
  changed after it published them, and a folder swapped for another are recorded in the last
  record, ``store_stop``.

The process runs with a clean environment in a session of its own, reads its configuration as one
JSON line on stdin, says ``ready`` on stdout, and stops when stdin closes (the parent stops the
store, or died), printing its summary as one JSON line.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import socketserver
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from harness import rundir
from harness.store_client import CHUNK, ID_HEADER
from harness.store_s3 import (
    DEFAULT_BUCKET,
    KEY_RULE,
    Target,
    error_xml,
    http_date,
    listing_xml,
    parse_target,
    valid_key,
)

MIB = 2**20
IO_TIMEOUT_S = 60.0  # a connection that sends nothing for this long is dropped
KEPT_CAP = 4 * 2**30  # the kept copies of one launch together; past it, uploads are published but not kept


class Link:
    """One link of ``rate`` bytes/s shared by every connection: each chunk is given the next free
    slot on it, and its reader waits until the slot has passed. A reader that wakes late (a busy
    machine) is not charged the lateness: while the link stays busy, slots follow each other from
    where the last one ended, so a transfer takes its bytes over the rate, not that plus every
    wake-up's delay."""

    GRACE_S = 0.25  # how late a reader may be and still continue the link's schedule

    def __init__(self, rate: float):
        self.rate = rate
        self._free_at = 0.0
        self._lock = threading.Lock()

    def cross(self, n: int) -> None:
        with self._lock:
            now = time.time()
            start = self._free_at if self._free_at > now - self.GRACE_S else now
            self._free_at = start + n / self.rate
            done = self._free_at
        delay = done - time.time()
        if delay > 0:
            time.sleep(delay)


class Store:
    """The objects, the folder they live in, the log."""

    def __init__(self, conf: dict[str, Any]):
        self.conf = conf
        self.root = conf["root"]
        self.rate = conf["mib_per_s"] * MIB
        self.max_bytes = int(conf["max_object_bytes"])
        self.up, self.down = Link(self.rate), Link(self.rate)
        self.log = rundir.RecordWriter(Path(conf["log"]), conf["key"])
        self.lock = threading.Lock()
        self.bucket = conf.get("bucket") or DEFAULT_BUCKET
        self.objects: dict[str, dict[str, Any]] = {}  # name -> {id, bytes, sha256, md5, t}
        self.ids = 0
        self.counts = {"puts": 0, "put_bytes": 0, "aborted": 0, "refused": 0, "gets": 0, "deletes": 0}
        self.stopping = threading.Event()
        self.kept_dfd: int | None = None  # the copies of what uploads carried (None: keep none)
        self.kept_bytes = 0
        if conf.get("kept_dir"):
            os.makedirs(conf["kept_dir"], exist_ok=True)
            self.kept_dfd = os.open(conf["kept_dir"], os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        os.makedirs(self.root, exist_ok=True)
        if conf.get("uid") is not None:  # sandboxed: the run's uid owns its work dir's folders, this one too
            os.chown(self.root, conf["uid"], conf["uid"], follow_symlinks=False)
        real = os.path.realpath(self.root)
        cwd = os.path.realpath(conf["cwd"])
        if not (real == cwd or real.startswith(cwd + os.sep)):
            raise SystemExit(f"store root {self.root} leads outside the working dir ({real})")
        self.dfd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        self.ino = os.fstat(self.dfd).st_ino
        for e in os.scandir(self.dfd):  # a folder reused from an earlier run: its objects are the store's
            if not e.name.startswith(".") and e.is_file(follow_symlinks=False) and valid_key(e.name):
                digest, size, md5 = _hash_at(self.dfd, e.name)
                self.objects[e.name] = {"id": None, "bytes": size, "sha256": digest, "md5": md5, "t": time.time()}
        self.write("store_start", root=self.root, bucket=self.bucket, mib_per_s=conf["mib_per_s"], max_object_bytes=self.max_bytes,
                   connections=conf["connections"], socket=conf["socket"], pid=os.getpid(),
                   preexisting=sorted(self.objects))

    def write(self, kind: str, **fields: Any) -> None:
        self.log.write({"kind": kind, "t": time.time(), **fields})

    def next_id(self) -> int:
        with self.lock:
            self.ids += 1
            return self.ids

    def keep(self, uid: int, n: int) -> tuple[str, int] | None:
        """A file for the copy of an upload of ``n`` bytes, within the launch's cap: its name and fd."""
        if self.kept_dfd is None:
            return None
        with self.lock:
            if self.kept_bytes + n > KEPT_CAP:
                return None
            self.kept_bytes += n
        name = f"{uid:06d}.bin"
        return name, os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=self.kept_dfd)

    def drop_kept(self, name: str, n: int) -> None:
        with self.lock:
            self.kept_bytes -= n
        if self.kept_dfd is not None:
            _unlink_quietly(name, self.kept_dfd)

    def count(self, **add: int) -> None:
        with self.lock:
            for k, v in add.items():
                self.counts[k] += v

    def stop(self) -> dict[str, Any]:
        """The folder as the server leaves it: objects, files it never wrote, changed objects."""
        foreign, changed = [], []
        for e in os.scandir(self.dfd):
            st = e.stat(follow_symlinks=False)
            obj = self.objects.get(e.name)
            kind = "file" if e.is_file(follow_symlinks=False) else "link" if e.is_symlink() else \
                "dir" if e.is_dir(follow_symlinks=False) else "other"
            if obj is None:
                foreign.append({"name": e.name[:200], "bytes": st.st_size, "kind": kind})
            elif kind != "file" or st.st_size != obj["bytes"] or _hash_at(self.dfd, e.name)[0] != obj["sha256"]:
                changed.append(e.name)
        missing = sorted(n for n in self.objects if not os.path.lexists(os.path.join(self.root, n)))
        try:
            replaced = os.stat(self.root, follow_symlinks=False).st_ino != self.ino
        except OSError:
            replaced = True
        summary = {**self.counts, "objects": [{"name": n, **o} for n, o in sorted(self.objects.items())],
                   "foreign": foreign[:200], "foreign_count": len(foreign), "changed": changed[:200],
                   "missing": missing[:200], "root_replaced": replaced}
        self.write("store_stop", **summary)
        self.log.close()
        if self.kept_dfd is not None:
            os.close(self.kept_dfd)
        return summary


def _hash_at(dfd: int, name: str) -> tuple[str, int, str]:
    """sha256, size and MD5 (the ETag) of a file in the store's folder."""
    h, m, n = hashlib.sha256(), hashlib.md5(usedforsecurity=False), 0
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dfd)
    try:
        while chunk := os.read(fd, 1 << 20):
            h.update(chunk)
            m.update(chunk)
            n += len(chunk)
    finally:
        os.close(fd)
    return h.hexdigest(), n, m.hexdigest()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    server_version = "trainwreck-store/2"
    timeout = IO_TIMEOUT_S
    server: Server

    def log_message(self, *args: Any) -> None:  # the store's log is store.jsonl
        pass

    def address_string(self) -> str:
        return "unix"

    def _peer(self) -> int | None:
        """The connecting process (under a launch, the agent's relay: who sent what is told by content)."""
        try:
            pid, _, _ = struct.unpack("3i", self.request.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                                    struct.calcsize("3i")))
            return pid
        except OSError:
            return None

    def _answer(self, code: int, body: bytes = b"", headers: dict | None = None, length: int | None = None,
                ctype: str = "application/xml") -> None:
        try:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body) if length is None else length))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD" and body:
                self.wfile.write(body)
        except OSError:
            pass

    def _error(self, code: int, s3code: str, message: str) -> None:
        self._answer(code, error_xml(s3code, message, self.path[:200]))

    def _target(self) -> Target | None:
        """What the request names in this store's bucket; None when it names another bucket (then
        answered already, 404)."""
        st: Store = self.server.store
        t = parse_target(self.path)
        if t.bucket != st.bucket:
            self._error(404, "NoSuchBucket", f"no bucket {t.bucket!r} here; this store serves {st.bucket!r} "
                        f"(PUT /{st.bucket}/KEY)")
            return None
        return t

    # -- PUT: an upload ------------------------------------------------------------------------
    def do_PUT(self) -> None:
        st: Store = self.server.store
        t0 = time.time()
        target = parse_target(self.path)
        key = target.key
        rec: dict[str, Any] = {"name": (key or self.path)[:200], "t0": t0, "pid": self._peer()}
        if target.bucket != st.bucket:
            return self._refuse(404, "NoSuchBucket", f"this store serves one bucket, {st.bucket!r}: "
                                f"PUT /{st.bucket}/KEY", rec)
        if key is None or not valid_key(key):
            return self._refuse(400, "InvalidArgument", f"{KEY_RULE}: PUT /{st.bucket}/KEY", rec)
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._refuse(411, "MissingContentLength", "send the object with its Content-Length "
                                "(chunked uploads are not supported)", rec)
        try:
            declared = int(self.headers.get("Content-Length", ""))
            if declared < 0:
                raise ValueError
        except ValueError:
            return self._refuse(411, "MissingContentLength", "an upload needs its Content-Length", rec)
        rec["declared"] = declared
        if declared > st.max_bytes:
            return self._refuse(413, "EntityTooLarge", f"{declared} bytes is over the store's limit of "
                                f"{st.max_bytes} bytes per object", rec)
        uid = st.next_id()
        partial = f".{key}.{uid}.partial"
        rec.update(id=uid, path=os.path.join(st.root, key))
        h, m, got, why = hashlib.sha256(), hashlib.md5(usedforsecurity=False), 0, None
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=st.dfd)
        kept = st.keep(uid, declared)
        try:
            while got < declared:
                if st.stopping.is_set():
                    why = "the launch ended during the upload"
                    break
                try:
                    chunk = self.rfile.read1(min(CHUNK, declared - got))
                except (TimeoutError, OSError) as e:
                    why = f"reading the body failed: {type(e).__name__}"
                    break
                if not chunk:
                    why = "the client closed the connection before sending the whole body"
                    break
                st.up.cross(len(chunk))
                for out in (fd, kept[1]) if kept else (fd,):
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(out, view):]
                h.update(chunk)
                m.update(chunk)
                got += len(chunk)
        finally:
            os.close(fd)
            if kept:
                os.close(kept[1])
        rec.update(bytes=got)
        if why is not None:
            _unlink_quietly(partial, st.dfd)
            if kept:
                st.drop_kept(kept[0], declared)
            st.count(aborted=1)
            st.write("put", status="aborted", why=why, t1=time.time(), dur=time.time() - t0, **rec)
            return self._error(400, "IncompleteBody", why)
        try:
            os.replace(partial, key, src_dir_fd=st.dfd, dst_dir_fd=st.dfd)
        except OSError as e:
            _unlink_quietly(partial, st.dfd)
            if kept:
                st.drop_kept(kept[0], declared)
            st.count(refused=1)
            st.write("put", status="error", why=f"publishing failed: {e.strerror}", t1=time.time(),
                     dur=time.time() - t0, **rec)
            return self._error(500, "InternalError", f"publishing {key} failed: {e.strerror}")
        t1 = time.time()
        digest, md5 = h.hexdigest(), m.hexdigest()
        with st.lock:
            st.objects[key] = {"id": uid, "bytes": got, "sha256": digest, "md5": md5, "t": t1}
        st.count(puts=1, put_bytes=got)
        if kept:
            rec["kept"] = kept[0]
        st.write("put", status="ok", sha256=digest, t1=t1, dur=t1 - t0, **rec)  # logged before the answer
        self._answer(200, headers={"ETag": f'"{md5}"', ID_HEADER: str(uid),
                                   "x-amz-checksum-sha256": base64.b64encode(h.digest()).decode()})

    def _refuse(self, code: int, s3code: str, why: str, rec: dict[str, Any]) -> None:
        st: Store = self.server.store
        st.count(refused=1)
        st.write("put", status="refused", code=code, why=why, t1=time.time(), bytes=0, **rec)
        self._error(code, s3code, why)
        self.close_connection = True
        try:  # do not read what the client is still sending: the answer is final
            self.request.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # -- GET and HEAD: an object, or the bucket's listing ---------------------------------------
    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        st: Store = self.server.store
        if (target := self._target()) is None:
            return
        key = target.key
        if key is None:
            prefix = target.prefix
            with st.lock:
                objs = [(n, o["bytes"], o["md5"], o["t"]) for n, o in sorted(st.objects.items())
                        if n.startswith(prefix)]
            st.write("list", pid=self._peer(), n=len(objs))
            return self._answer(200, listing_xml(st.bucket, prefix, objs))
        with st.lock:
            obj = st.objects.get(key)
        if obj is None:
            return self._error(404, "NoSuchKey", f"no object {key!r} in {st.bucket!r}")
        headers = {"ETag": f'"{obj["md5"]}"', "Last-Modified": http_date(obj["t"])}
        if self.command == "HEAD":
            return self._answer(200, headers=headers, length=obj["bytes"], ctype="application/octet-stream")
        t0 = time.time()
        try:
            fd = os.open(key, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=st.dfd)
        except OSError as e:
            return self._error(404, "NoSuchKey", f"{key}: {e.strerror}")
        with os.fdopen(fd, "rb") as f:
            data = f.read(st.max_bytes + 1)
        st.count(gets=1)
        status = "ok"
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(data)))
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            for i in range(0, len(data), CHUNK):
                st.down.cross(min(CHUNK, len(data) - i))
                self.wfile.write(data[i:i + CHUNK])
        except OSError:
            status = "aborted"
        st.write("get", name=key, pid=self._peer(), bytes=len(data), t0=t0, t1=time.time(), status=status)

    # -- DELETE: 204 whether or not the key was there, as S3 answers ----------------------------
    def do_DELETE(self) -> None:
        st: Store = self.server.store
        if (target := self._target()) is None:
            return
        key = target.key
        if key is None:
            return self._error(409, "BucketNotEmpty", "this store's bucket cannot be deleted")
        with st.lock:
            obj = st.objects.pop(key, None)
        if obj is None:
            st.write("delete", name=key[:200], pid=self._peer(), status="missing")
            return self._answer(204)
        _unlink_quietly(key, st.dfd)
        st.count(deletes=1)
        st.write("delete", name=key, path=os.path.join(st.root, key), id=obj["id"], pid=self._peer(),
                 status="ok")
        self._answer(204)


def _unlink_quietly(name: str, dfd: int) -> None:
    try:
        os.unlink(name, dir_fd=dfd)
    except OSError:
        pass


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, path: str, store: Store, connections: int):
        self.store = store
        self.slots = threading.BoundedSemaphore(connections)
        self.active: set[threading.Thread] = set()
        super().__init__(path, Handler)

    def process_request(self, request, client_address) -> None:
        if not self.slots.acquire(blocking=False):
            try:
                request.sendall(b"HTTP/1.0 503 Slow Down\r\nContent-Length: 0\r\n\r\n")
            except OSError:
                pass
            self.store.count(refused=1)
            self.store.write("busy", pid=None)
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address) -> None:
        me = threading.current_thread()
        self.active.add(me)
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.active.discard(me)
            self.slots.release()


def serve(conf: dict[str, Any]) -> dict[str, Any]:
    """Run until stdin closes (the parent stops the store, or died)."""
    store = Store(conf)
    path = conf["socket"]
    if os.path.lexists(path):
        os.unlink(path)
    server = Server(path, store, int(conf["connections"]))
    if conf.get("uid") is not None:
        os.chown(path, conf["uid"], conf["uid"])
    os.chmod(path, 0o600)
    loop = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                            name="trainwreck-store", daemon=True)
    loop.start()
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    try:
        while sys.stdin.buffer.read(4096):  # EOF: the parent is done with us (or gone)
            pass
    except (OSError, KeyboardInterrupt):
        pass
    server.shutdown()
    store.stopping.set()
    deadline = time.time() + 5.0
    while server.active and time.time() < deadline:
        time.sleep(0.05)
    server.server_close()
    try:
        os.unlink(path)
    except OSError:
        pass
    return store.stop()


def main() -> int:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when the store stops
    line = sys.stdin.buffer.readline()
    try:
        conf = json.loads(line)
    except ValueError:
        sys.stderr.write("store: no configuration on stdin\n")
        return 2
    summary = serve(conf)
    sys.stdout.write(json.dumps({k: v for k, v in summary.items() if k != "objects"}
                                | {"objects": len(summary["objects"])}) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())

