"""The exercise's artifact store, run as a service outside the ranks for one launch: its
configuration (``StoreConfig``, from a manifest's ``[run.store]``) and the parent's handle on the
server process (``harness.store_server``), an S3-compatible object store (``harness.store_s3``) on a
Unix socket. Inside the launch, ``harness.store_relay`` (run by the agent) puts it at a TCP address
on the sandbox's loopback and gives the ranks that address as ``AWS_ENDPOINT_URL_S3``, so a script
reaches it as production code reaches S3. The kit's own client: ``harness.store_client``.

Why a separate process: the store's cost is part of what an exercise grades (periodic-stall's
upload sits behind a 15 MiB/s link). When the store ran in the rank's process, a script could give
it a virtual clock or replace it, and the upload "took" no time while it still ran in the step
loop. Here the link, the log and the copies of what was uploaded are the server's, in the run dir
the sandbox never sees (``store.jsonl``, ``store-objects/``).

Launch's part (``harness.launch``): ``svc = start(cfg.store, run_dir, key, cwd)`` before the
launcher starts (``socket_dir``/``uid``/``visible_dir`` under the sandbox, see ``start``), the
ranks' environment gets ``svc.env()``, and ``svc.stop()`` once the process tree is gone. The
server process is started with a clean environment (no run dir marker, so ending the job's tree
never ends it) in a session of its own, and ends by itself when the parent dies (its stdin closes).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import rundir
from harness.errors import LaunchError
from harness.store_client import BUCKET_ENV, ROOT_ENV, SOCKET_NAME, STORE_ENV
from harness.store_s3 import BUCKET, DEFAULT_BUCKET

LOG = "store.jsonl"  # in the run dir: the server's signed records
KEPT_DIR = "store-objects"  # in the run dir: the server's copy of what each upload carried
STDERR_LOG = "store.log"  # in the run dir: the server process's own stderr (tracebacks, if any)
MIB = 2**20
READY_TIMEOUT_S = 60.0  # python start-up of the server on a loaded machine


@dataclass
class StoreConfig:
    """The artifact store a launch runs: where objects go and how fast its link is."""

    root: str = "artifacts"  # relative to the script's working dir
    bucket: str = DEFAULT_BUCKET  # the one bucket it serves
    mib_per_s: float = 16.0  # the link, each way, shared by every connection
    max_object_mib: float = 256.0  # a larger upload is refused before its body is read
    connections: int = 16  # served at once; more are answered 503
    keep_copies: bool = False  # a copy of every upload's bytes in the run dir (a grading reads them)

    def validate(self) -> None:
        if not self.root or os.path.isabs(self.root) or ".." in Path(self.root).parts:
            raise LaunchError(f"store root {self.root!r}: give a folder inside the working dir (relative, no '..')")
        if not self.mib_per_s > 0 or not self.max_object_mib > 0 or self.connections < 1:
            raise LaunchError("store mib_per_s and max_object_mib must be positive, connections at least 1")
        if not BUCKET.match(self.bucket):
            raise LaunchError(f"store bucket {self.bucket!r}: 3 to 63 lower-case letters, digits, '.' and '-'")


# -- the parent's handle -----------------------------------------------------------------------

class StoreService:
    def __init__(self, proc: subprocess.Popen, socket_path: str, visible_path: str, root: str,
                 own_dir: str | None, bucket: str = DEFAULT_BUCKET):
        self.proc = proc
        self.bucket = bucket
        self.socket_path = socket_path
        self.visible_path = visible_path
        self.root = root
        self._own_dir = own_dir
        self.summary: dict[str, Any] | None = None

    def env(self) -> dict[str, str]:
        """What each rank's environment needs to reach the store."""
        return {STORE_ENV: self.visible_path, ROOT_ENV: self.root, BUCKET_ENV: self.bucket}

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
            "kept_dir": str(Path(run_dir).resolve() / KEPT_DIR) if cfg.keep_copies else None,
            "root": root, "bucket": cfg.bucket, "cwd": os.path.realpath(cwd), "mib_per_s": cfg.mib_per_s,
            "max_object_bytes": int(cfg.max_object_mib * MIB), "connections": cfg.connections}
    with open(Path(run_dir) / STDERR_LOG, "ab") as err:
        proc = subprocess.Popen([sys.executable, "-m", "harness.store_server"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=err, env=env, cwd=kit, start_new_session=True)
    svc = StoreService(proc, sock, visible, root, own_dir, cfg.bucket)
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


def share_copies(run_dir: Path, key: str) -> int:
    """After the launch, once the file watch has closed: each copy the store kept whose bytes are a
    version the parent's file watch also kept (the script uploaded the very file it published, as
    most do) becomes a hard link to that version, so the bytes are on disk once. Both logs are read
    as signed, and both folders are the parent's (the run dir the sandbox never sees), so the
    digests the records carry are not computed again. Returns the bytes freed."""
    from harness.filewatch import KEPT_DIR as WATCHED_DIR
    from harness.filewatch import LOG as WATCH_LOG

    run_dir = Path(run_dir)
    if not (run_dir / LOG).exists() or not (run_dir / WATCH_LOG).exists():
        return 0
    seen = {r["sha256"]: run_dir / WATCHED_DIR / str(r["kept"])
            for r in rundir.read_records(run_dir / WATCH_LOG, key).valid
            if r.get("kind") == "version" and r.get("kept") and r.get("sha256")}
    freed = 0
    for r in rundir.read_records(run_dir / LOG, key).valid:
        if r.get("kind") != "put" or not r.get("kept") or r.get("sha256") not in seen:
            continue
        copy, version = run_dir / KEPT_DIR / str(r["kept"]), seen[r["sha256"]]
        try:
            if copy.stat().st_nlink > 1:
                continue
            tmp = copy.with_suffix(".link")
            os.link(version, tmp)
            freed += copy.stat().st_size
            os.replace(tmp, copy)
        except OSError:
            continue
    return freed
