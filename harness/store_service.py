"""The kit's artifact store as a service outside the ranks: an S3-like object store (HTTP PUT, GET,
DELETE and LIST of objects by name, over a Unix socket) that the parent starts for a launch and
stops after it. Protocol and client: ``harness.store_client``.

Why a separate process: the store's cost is part of what an exercise grades (periodic-stall's
upload sits behind a 15 MiB/s link). When the store ran in the rank's process, a script could give
it a virtual clock or replace it, and the upload "took" no time while it still ran in the step
loop. Here the link is the server's: it reads an upload's body at the modelled rate (every
connection shares the one link, so parallel uploads get no more than the rate between them) and
publishes the object and answers only once the last byte has crossed it. The client's
``mb_per_s`` cannot change the rate. Every request is logged by the server, with its own
timestamps, sizes and the object's sha256, into ``<run_dir>/store.jsonl``, signed with the run key
like every record the grader trusts; the run dir is the parent's (the sandbox never sees it).

Objects are kept under the script's working dir (``StoreConfig.root``, ``artifacts`` for
periodic-stall), where the grader reads them: written under a hidden partial name, then renamed,
all through a directory fd opened without following links (the ranks can write in the working
dir; a link planted there must not lead the server's writes elsewhere). When the launch ends the
server lists the folder: files it never wrote there (copied in by hand), objects whose bytes
changed after it published them, and a folder swapped for another are recorded in the last
record, ``store_stop``.

Launch's part (``harness.launch``): ``svc = start(cfg.store, run_dir, key, cwd)`` before the
launcher starts (``socket_dir``/``uid``/``visible_dir`` under the sandbox, see ``start``), the
ranks' environment gets ``svc.env()``, and ``svc.stop()`` once the process tree is gone. The
server process is started with a clean environment (no run dir marker, so ending the job's tree
never ends it) in a session of its own, and ends by itself when the parent dies (its stdin closes).
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import socket
import socketserver
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from harness import rundir
from harness.errors import LaunchError
from harness.store_client import CHUNK, ID_HEADER, ROOT_ENV, SOCKET_NAME, STORE_ENV, valid_name

LOG = "store.jsonl"  # in the run dir: the server's signed records
STDERR_LOG = "store.log"  # in the run dir: the server process's own stderr (tracebacks, if any)
MIB = 2**20
READY_TIMEOUT_S = 60.0  # python start-up of the server on a loaded machine
IO_TIMEOUT_S = 60.0  # a connection that sends nothing for this long is dropped


@dataclass
class StoreConfig:
    """The artifact store a launch runs: where objects go and how fast its link is."""

    root: str = "artifacts"  # relative to the script's working dir
    mib_per_s: float = 16.0  # the link, each way, shared by every connection
    max_object_mib: float = 256.0  # a larger upload is refused before its body is read
    connections: int = 16  # served at once; more are answered 503

    def validate(self) -> None:
        if not self.root or os.path.isabs(self.root) or ".." in Path(self.root).parts:
            raise LaunchError(f"store root {self.root!r}: give a folder inside the working dir (relative, no '..')")
        if not self.mib_per_s > 0 or not self.max_object_mib > 0 or self.connections < 1:
            raise LaunchError("store mib_per_s and max_object_mib must be positive, connections at least 1")


# -- the parent's handle -----------------------------------------------------------------------

class StoreService:
    def __init__(self, proc: subprocess.Popen, socket_path: str, visible_path: str, root: str,
                 own_dir: str | None):
        self.proc = proc
        self.socket_path = socket_path
        self.visible_path = visible_path
        self.root = root
        self._own_dir = own_dir
        self.summary: dict[str, Any] | None = None

    def env(self) -> dict[str, str]:
        """What each rank's environment needs to reach the store."""
        return {STORE_ENV: self.visible_path, ROOT_ENV: self.root}

    def stop(self, timeout_s: float = 20.0) -> dict[str, Any]:
        """After the job: the server ends what is in flight, lists its folder, writes ``store_stop``
        and exits. Returns its summary (``{}`` when it could not say)."""
        if self.summary is not None:
            return self.summary
        out = b""
        try:  # closes its stdin: the server's signal to stop
            out, _ = self.proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        except (OSError, ValueError):
            self.proc.wait(timeout=timeout_s)
        self.summary = {}
        for line in (out or b"").decode(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    self.summary = json.loads(line)
                except ValueError:
                    pass
        for p in (self.socket_path,):
            try:
                os.unlink(p)
            except OSError:
                pass
        if self._own_dir:
            try:
                os.rmdir(self._own_dir)
            except OSError:
                pass
        return self.summary


def start(cfg: StoreConfig, run_dir: Path, key: str, cwd: Path, socket_dir: Path | None = None,
          uid: int | None = None, visible_dir: str | None = None) -> StoreService:
    """Start the store for one launch. ``socket_dir``: where to put the socket (under the sandbox,
    the channel's folder, which appears inside as ``/run/trainwreck``, given as ``visible_dir``);
    a folder of its own in /tmp when None. ``uid``: the sandbox's uid, given the socket so it can
    connect. Raises LaunchError when the server does not come up."""
    import tempfile

    cfg.validate()
    own_dir = None
    if socket_dir is None:
        own_dir = tempfile.mkdtemp(prefix="tw-store-")  # short: sun_path holds 108 bytes
        os.chmod(own_dir, 0o711)
        socket_dir = Path(own_dir)
    sock = str(Path(socket_dir) / SOCKET_NAME)
    visible = f"{visible_dir.rstrip('/')}/{SOCKET_NAME}" if visible_dir else sock
    root = os.path.join(os.path.realpath(cwd), cfg.root)
    kit = str(Path(__file__).resolve().parent.parent)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": kit, "LANG": "C.UTF-8",
           "PYTHONDONTWRITEBYTECODE": "1"}
    conf = {"key": key, "log": str(Path(run_dir).resolve() / LOG), "socket": sock, "uid": uid,
            "root": root, "cwd": os.path.realpath(cwd), "mib_per_s": cfg.mib_per_s,
            "max_object_bytes": int(cfg.max_object_mib * MIB), "connections": cfg.connections}
    with open(Path(run_dir) / STDERR_LOG, "ab") as err:
        proc = subprocess.Popen([sys.executable, "-m", "harness.store_service"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=err, env=env, cwd=kit, start_new_session=True)
    svc = StoreService(proc, sock, visible, root, own_dir)
    stdin, stdout = proc.stdin, proc.stdout
    assert stdin is not None and stdout is not None  # started with both piped
    try:
        stdin.write((json.dumps(conf) + "\n").encode())
        stdin.flush()
    except OSError:
        pass
    ready, deadline = b"", time.time() + READY_TIMEOUT_S
    fd = stdout.fileno()
    while not ready.endswith(b"\n") and time.time() < deadline and proc.poll() is None:
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            ready += chunk
    if not ready.startswith(b"ready"):
        svc.stop(timeout_s=5)
        tail = (Path(run_dir) / STDERR_LOG).read_text(errors="replace").strip().splitlines()[-1:]
        raise LaunchError(f"the artifact store did not start ({ready.decode(errors='replace').strip() or 'no answer'}"
                          f"{'; ' + tail[0] if tail else ''}); see {Path(run_dir) / STDERR_LOG}")
    return svc


# -- the server ----------------------------------------------------------------------------------

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
        self.objects: dict[str, dict[str, Any]] = {}  # name -> {id, bytes, sha256, t}
        self.ids = 0
        self.counts = {"puts": 0, "put_bytes": 0, "aborted": 0, "refused": 0, "gets": 0, "deletes": 0}
        self.stopping = threading.Event()
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
            if not e.name.startswith(".") and e.is_file(follow_symlinks=False) and valid_name(e.name):
                digest, size = _hash_at(self.dfd, e.name)
                self.objects[e.name] = {"id": None, "bytes": size, "sha256": digest, "t": time.time()}
        self.write("store_start", root=self.root, mib_per_s=conf["mib_per_s"], max_object_bytes=self.max_bytes,
                   connections=conf["connections"], socket=conf["socket"], pid=os.getpid(),
                   preexisting=sorted(self.objects))

    def write(self, kind: str, **fields: Any) -> None:
        self.log.write({"kind": kind, "t": time.time(), **fields})

    def next_id(self) -> int:
        with self.lock:
            self.ids += 1
            return self.ids

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
        return summary


def _hash_at(dfd: int, name: str) -> tuple[str, int]:
    h, n = hashlib.sha256(), 0
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dfd)
    try:
        while chunk := os.read(fd, 1 << 20):
            h.update(chunk)
            n += len(chunk)
    finally:
        os.close(fd)
    return h.hexdigest(), n


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    server_version = "trainwreck-store/1"
    timeout = IO_TIMEOUT_S
    server: Server

    def log_message(self, *args: Any) -> None:  # the store's log is store.jsonl
        pass

    def address_string(self) -> str:
        return "unix"

    def _peer(self) -> int | None:
        try:
            pid, _, _ = struct.unpack("3i", self.request.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                                    struct.calcsize("3i")))
            return pid
        except OSError:
            return None

    def _answer(self, code: int, obj: Any = None, body: bytes | None = None, headers: dict | None = None) -> None:
        data = body if body is not None else json.dumps(obj if obj is not None else {}).encode()
        try:
            self.send_response(code)
            self.send_header("Content-Type", "application/octet-stream" if body is not None else "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
        except OSError:
            pass

    def _name(self) -> str | None:
        path = self.path.split("?", 1)[0]
        if not path.startswith("/objects/"):
            return None
        return path[len("/objects/"):]

    # -- PUT: an upload ------------------------------------------------------------------------
    def do_PUT(self) -> None:
        st: Store = self.server.store
        t0 = time.time()
        pid = self._peer()
        name = self._name()
        rec: dict[str, Any] = {"name": (name or self.path)[:200], "t0": t0, "pid": pid}
        if name is None or not valid_name(name):
            return self._refuse(400, "an object name is letters, digits, '.', '_' and '-', not starting with "
                                "'.'; PUT /objects/NAME", rec)
        try:
            declared = int(self.headers.get("Content-Length", ""))
            if declared < 0:
                raise ValueError
        except ValueError:
            return self._refuse(411, "an upload needs its Content-Length", rec)
        rec["declared"] = declared
        if declared > st.max_bytes:
            return self._refuse(413, f"{declared} bytes is over the store's limit of {st.max_bytes} bytes per "
                                "object", rec)
        uid = st.next_id()
        partial = f".{name}.{uid}.partial"
        rec.update(id=uid, path=os.path.join(st.root, name))
        h, got, why = hashlib.sha256(), 0, None
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=st.dfd)
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
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view):]
                h.update(chunk)
                got += len(chunk)
        finally:
            os.close(fd)
        rec.update(bytes=got)
        if why is not None:
            _unlink_quietly(partial, st.dfd)
            st.count(aborted=1)
            st.write("put", status="aborted", why=why, t1=time.time(), dur=time.time() - t0, **rec)
            return self._answer(400, {"error": why})
        try:
            os.replace(partial, name, src_dir_fd=st.dfd, dst_dir_fd=st.dfd)
        except OSError as e:
            _unlink_quietly(partial, st.dfd)
            st.count(refused=1)
            st.write("put", status="error", why=f"publishing failed: {e.strerror}", t1=time.time(),
                     dur=time.time() - t0, **rec)
            return self._answer(500, {"error": f"publishing {name} failed: {e.strerror}"})
        t1 = time.time()
        digest = h.hexdigest()
        with st.lock:
            st.objects[name] = {"id": uid, "bytes": got, "sha256": digest, "t": t1}
        st.count(puts=1, put_bytes=got)
        st.write("put", status="ok", sha256=digest, t1=t1, dur=t1 - t0, **rec)  # logged before the answer
        self._answer(200, {"id": uid, "name": name, "bytes": got, "sha256": digest, "t0": t0, "t1": t1},
                     headers={ID_HEADER: str(uid)})

    def _refuse(self, code: int, why: str, rec: dict[str, Any]) -> None:
        st: Store = self.server.store
        st.count(refused=1)
        st.write("put", status="refused", code=code, why=why, t1=time.time(), bytes=0, **rec)
        self._answer(code, {"error": why})
        self.close_connection = True
        try:  # do not read what the client is still sending: the answer is final
            self.request.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # -- GET: an object, the listing, or the store's settings -------------------------------------
    def do_GET(self) -> None:
        st: Store = self.server.store
        if self.path.split("?", 1)[0] == "/info":
            return self._answer(200, {"root": st.root, "mib_per_s": st.conf["mib_per_s"],
                                      "max_object_bytes": st.max_bytes})
        name = self._name()
        if name == "":
            with st.lock:
                objs = [{"name": n, "bytes": o["bytes"], "sha256": o["sha256"]} for n, o in sorted(st.objects.items())]
            st.write("list", pid=self._peer(), n=len(objs))
            return self._answer(200, {"objects": objs})
        if name is None or name not in st.objects:
            return self._answer(404, {"error": f"no object {name!r}"})
        t0 = time.time()
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=st.dfd)
        except OSError as e:
            return self._answer(404, {"error": f"{name}: {e.strerror}"})
        with os.fdopen(fd, "rb") as f:
            data = f.read(st.max_bytes + 1)
        st.count(gets=1)
        status = "ok"
        try:
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            for i in range(0, len(data), CHUNK):
                st.down.cross(min(CHUNK, len(data) - i))
                self.wfile.write(data[i:i + CHUNK])
        except OSError:
            status = "aborted"
        st.write("get", name=name, pid=self._peer(), bytes=len(data), t0=t0, t1=time.time(), status=status)

    # -- DELETE ------------------------------------------------------------------------------
    def do_DELETE(self) -> None:
        st: Store = self.server.store
        name = self._name()
        with st.lock:
            obj = st.objects.pop(name, None) if name else None
        if obj is None or not name:  # (no name: no object)
            st.write("delete", name=(name or self.path)[:200], pid=self._peer(), status="missing")
            return self._answer(404, {"error": f"no object {name!r}"})
        _unlink_quietly(name, st.dfd)
        st.count(deletes=1)
        st.write("delete", name=name, path=os.path.join(st.root, name), id=obj["id"], pid=self._peer(),
                 status="ok")
        self._answer(200, {"deleted": name})


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
                request.sendall(b"HTTP/1.0 503 Busy\r\nContent-Length: 0\r\n\r\n")
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

