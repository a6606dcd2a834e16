"""A bubblewrap sandbox per graded run: what the candidate's processes can see, write and reach.

``build(policy, cmd)`` wraps the launcher's command (``python -m torch.distributed.run ... -m
harness.bootstrap SCRIPT``) so that, inside:

- the system, the Python install, the virtualenv and the kit's ``harness/`` package are visible
  read-only, each at its real path (the venv's editable install maps ``harness`` there, and paths
  in records and tracebacks mean the same inside and out); the rest of the kit (``solutions/``,
  ``exercises/``, ``rubrics/``, ``grader/``, ``.trainwreck/``), the home directory (a tmpfs over
  it) and everything else on the machine are absent;
- only the folders the caller names writable (a fresh work dir per run), plus a private,
  size-limited ``/tmp`` and ``/dev/shm``;
- a fresh PID namespace whose init dies with the grader (``--die-with-parent``): when it dies the
  kernel kills every process in it, double-forked daemons included;
- a network namespace with loopback only (the rendezvous and gloo run over ``lo``);
- a new session (no terminal to inject into), no capabilities, ``no_new_privs`` (bwrap sets it);
- an environment cleared to what the run needs: never the run key, ``PYTHONNOUSERSITE=1``, and
  ``PYTHONSAFEPATH=1`` so no process puts its working folder (the candidate's) ahead of the kit on
  ``sys.path``;
- when the grader runs as root, the run as an unprivileged uid (65534), so that nothing it can
  reach is root-owned-and-writable and the kernel's per-user task limit applies.

Two findings behind the flags: as root, bwrap keeps every capability inside the sandbox unless
told otherwise, and with them a ``mount -o remount,rw`` made the read-only kit writable (hence
``--cap-drop ALL``); and bwrap creates the missing parents of a mount point with mode 0700, which
an unprivileged uid cannot cross (hence an explicit ``--dir`` for each).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from harness.channel import CHANNEL_ENV
from harness.channel import MOUNT as CHANNEL_MOUNT
from harness.channel import SOCKET_NAME as CHANNEL_SOCKET
from harness.limits import MB, Limits

SANDBOX_UID = 65534  # "nobody": the run's uid when the grader is root
KEY_ENV = "TRAINWRECK_KEY"
# The environment the run keeps, by prefix or exact name; anything else of the grader's (tokens,
# credentials, proxies, the user's PYTHON* settings) stays outside.
ENV_PREFIXES = ("TRAINWRECK_", "TORCH_", "TORCHELASTIC_", "PYTORCH_", "NCCL_", "GLOO_", "TP_",
                "OMP_", "KMP_", "MKL_", "CUDA_", "NVIDIA_",
                "MALLOC_")  # glibc's allocator settings: every grading run fixes its mmap threshold
ENV_NAMES = ("PYTHONUNBUFFERED", "PYTHONFAULTHANDLER", "LANG", "LC_ALL", "TZ")
# Runs inside the sandbox as its first process, before the launcher: the per-user task limit must
# be set after the user namespace exists (set before, it would count the grader's own processes
# against it), and dropping to an unprivileged uid needs the one capability kept for it.
_SHIM = """\
import json, os, resource, sys
cfg = json.loads(sys.argv[1])
for name, value in cfg["rlimits"].items():
    resource.setrlimit(getattr(resource, name), (value, value))
if cfg["uid"] is not None:
    os.setgroups([])
    os.setresgid(cfg["gid"], cfg["gid"], cfg["gid"])
    os.setresuid(cfg["uid"], cfg["uid"], cfg["uid"])
os.execv(sys.argv[2], sys.argv[2:])
"""


class SandboxError(Exception):
    """The sandbox cannot be built as asked; the message names the problem and the fix."""


@dataclass(frozen=True)
class PythonInstall:
    """What the run's Python needs visible: its install, the virtualenv, site dirs outside both."""

    executable: Path  # the interpreter the launcher runs (the venv's python)
    base_prefix: Path
    prefix: Path
    site_dirs: tuple[Path, ...] = ()

    @classmethod
    def current(cls) -> PythonInstall:
        import site

        base, prefix = Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()
        sites = tuple(Path(p).resolve() for p in site.getsitepackages()
                      if Path(p).is_dir() and not _under(Path(p).resolve(), (base, prefix)))
        return cls(Path(sys.executable), base, prefix, sites)

    def roots(self) -> list[Path]:
        return _outermost([self.base_prefix, self.prefix, *self.site_dirs])


@dataclass
class SandboxPolicy:
    kit_root: Path  # only kit_root/harness is exposed
    readable: list[Path]  # read-only at their real paths: the submission's folder, fixtures
    writable: list[Path]  # read-write at their real paths: the run's fresh work dir
    channel_dir: Path | None = None  # the parent's channel folder, read-only at CHANNEL_MOUNT
    limits: Limits = field(default_factory=Limits)
    python: PythonInstall = field(default_factory=PythonInstall.current)
    uid: int | None = None  # the uid inside; None: SANDBOX_UID when the grader is root, else its own
    gpu: bool = False  # expose /dev/nvidia* and /sys for CUDA and NCCL
    cwd: Path | None = None  # defaults to the first writable folder

    def run_uid(self) -> int | None:
        """The uid the run drops to, or None to keep the grader's (mapped in a user namespace)."""
        if self.uid is not None:
            return None if self.uid == os.geteuid() else self.uid
        return SANDBOX_UID if os.geteuid() == 0 else None


@dataclass(frozen=True)
class Wrapped:
    argv: list[str]
    env: dict[str, str]


def build(policy: SandboxPolicy, cmd: list[str], env: dict[str, str] | None = None) -> Wrapped:
    """The argv and environment that run ``cmd`` inside the sandbox. ``env`` is the run's
    environment as the launcher would have set it; only what the run needs passes."""
    policy.limits.validate()
    bwrap = shutil.which("bwrap")
    if not bwrap:
        raise SandboxError(NOT_INSTALLED)
    uid = policy.run_uid()
    if uid is not None and os.geteuid() != 0:
        raise SandboxError(f"running the sandbox as uid {uid} needs the grader to be root; "
                           "leave the uid unset to run as yourself")
    _check_paths(policy)
    if not cmd or not os.path.isabs(cmd[0]):
        raise SandboxError(f"command {cmd[:1]} must start with an absolute path: inside, the "
                           "working folder is the run's work dir")
    args = [bwrap, *_namespaces(uid), "--die-with-parent", "--new-session"]
    mounts = _Mounts()
    mounts.system()
    home = Path.home().resolve()
    if home != Path("/") and home.is_dir():
        mounts.tmpfs(home, "1777", policy.limits.tmp_mb)  # the user's files, dotfiles, user site: gone
    mounts.tmpfs(Path("/tmp"), "1777", policy.limits.tmp_mb)
    mounts.tmpfs(Path("/dev/shm"), "1777", policy.limits.shm_mb)
    mounts.python(policy.python)
    mounts.bind("--ro-bind", policy.kit_root.resolve() / "harness")
    # Outer folders first, so a folder inside another is mounted on top of it, not hidden by it.
    binds = {p.resolve(): "--ro-bind" for p in policy.readable}
    binds.update({p.resolve(): "--bind" for p in policy.writable})
    for p in sorted(binds, key=lambda p: len(p.parts)):
        mounts.bind(binds[p], p)
    if policy.channel_dir is not None:
        mounts.bind("--ro-bind", policy.channel_dir.resolve(), Path(CHANNEL_MOUNT))
    if policy.gpu:
        mounts.gpu()
    cwd = (policy.cwd or (policy.writable[0] if policy.writable else Path("/tmp"))).resolve()
    # The sandbox's own root (a tmpfs holding the mount points) read-only too: in a user
    # namespace its folders belong to the run, which could otherwise fill memory through them.
    args += mounts.args + ["--remount-ro", "/", "--chdir", str(cwd)]
    limits = policy.limits
    shim_cfg = {
        "rlimits": {"RLIMIT_NPROC": limits.tasks, "RLIMIT_FSIZE": int(limits.file_mb * MB),
                    "RLIMIT_CORE": 0},
        "uid": uid, "gid": uid,
    }
    shim = [str(Path(policy.python.executable).resolve()), "-I", "-S", "-c", _SHIM, json.dumps(shim_cfg)]
    return Wrapped(argv=args + ["--", *shim, *cmd],
                   env=sandbox_env(env or {}, policy, home))


def sandbox_env(env: dict[str, str], policy: SandboxPolicy, home: Path) -> dict[str, str]:
    """The run's environment: a fixed base, then the run's own settings by allow-list."""
    if KEY_ENV in env:
        raise SandboxError(f"{KEY_ENV} must not enter the sandbox: records are signed by the parent "
                           "(harness.channel_server); stop passing the key to the ranks")
    venv_bin = str(Path(policy.python.prefix) / "bin")
    out = {
        "PATH": os.pathsep.join([venv_bin, "/usr/local/bin", "/usr/bin", "/bin"]),
        "HOME": str(home if home != Path("/") else "/tmp"),
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "PYTHONNOUSERSITE": "1",  # the user site is hidden anyway; never look for it
        "PYTHONSAFEPATH": "1",  # no process puts its cwd or script folder first on sys.path
        "PYTHONDONTWRITEBYTECODE": "1",  # the kit and venv are read-only
        "PYTHONPATH": str(policy.kit_root.resolve()),  # inside, it holds harness/ and nothing else
        "GLOO_SOCKET_IFNAME": "lo",  # the only interface: never the hostname's outside address
        "NCCL_SOCKET_IFNAME": "lo",
        "TP_SOCKET_IFNAME": "lo",
    }
    if policy.channel_dir is not None:
        out[CHANNEL_ENV] = f"{CHANNEL_MOUNT}/{CHANNEL_SOCKET}"
    for k, v in env.items():
        if (k in ENV_NAMES or k.startswith(ENV_PREFIXES)) and not k.endswith("SOCKET_IFNAME"):
            out[k] = v
    if policy.gpu and "LD_LIBRARY_PATH" in env:
        out["LD_LIBRARY_PATH"] = env["LD_LIBRARY_PATH"]
    return out



def prepare_writable(path: Path, uid: int | None) -> None:
    """A fresh, empty folder the run may write, owned by the run's uid."""
    path.mkdir(parents=True, exist_ok=True)
    if uid is not None:
        for root, dirs, files in os.walk(path):
            for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
                os.lchown(name, uid, uid)


@dataclass(frozen=True)
class SealReport:
    removed: list[tuple[str, str]]  # (path relative to the folder, what it was)
    files: int
    bytes: int


def seal(folder: Path, owner: int | None = None) -> SealReport:
    """After the run, before anything reads what it left: remove what a reader could trip on
    (FIFOs, sockets, devices: an ``open`` that blocks; symlinks that leave the folder or dangle:
    a read of something else), keep regular files, folders and symlinks to files inside. With
    ``owner``, give everything back to that uid (the grader's, after a run as nobody). Only
    ``lstat``, ``unlink`` and ``lchown``: nothing here opens a file the run made."""
    root = folder.resolve()
    removed, files, size = [], 0, 0
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue
            kind = None
            if stat.S_ISLNK(mode):
                target = Path(os.path.realpath(path))
                if not (_under(target, [root]) and target.is_file()):
                    kind = "symlink out of the folder" if target.exists() else "dangling symlink"
            elif stat.S_ISFIFO(mode):
                kind = "fifo"
            elif stat.S_ISSOCK(mode):
                kind = "socket"
            elif stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
                kind = "device"
            elif stat.S_ISREG(mode):
                files += 1
                size += os.lstat(path).st_size
            if kind:
                os.unlink(path)
                removed.append((str(path.relative_to(root)), kind))
                if name in dirnames:
                    dirnames.remove(name)  # a symlink to a folder: never walked into
            elif owner is not None:
                os.lchown(path, owner, owner)
    if owner is not None:
        os.lchown(root, owner, owner)
    return SealReport(removed, files, size)


# -- probe -------------------------------------------------------------------------------------

NOT_INSTALLED = ("bubblewrap not installed: apt-get install bubblewrap, "
                 "or grade with --no-sandbox (unisolated)")


@dataclass(frozen=True)
class Probe:
    ok: bool
    reason: str  # one line: why not, and the fix; empty when ok
    mode: str = ""  # "setuid" (root grader, run as an unprivileged uid) or "userns"


@cache
def probe() -> Probe:
    """Whether a sandbox can be built on this machine (once per process: ~30 ms)."""
    bwrap = shutil.which("bwrap")
    if not bwrap:
        return Probe(False, NOT_INSTALLED)
    torch_spec = importlib.util.find_spec("torch")
    py = PythonInstall.current()
    if torch_spec and torch_spec.origin and not _under(Path(torch_spec.origin).resolve(), py.roots()):
        return Probe(False, f"torch is installed at {Path(torch_spec.origin).parent}, outside the Python "
                            "install and the virtualenv the sandbox exposes (the user site?): install "
                            "it in the virtualenv, or grade with --no-sandbox (unisolated)")
    uid = SANDBOX_UID if os.geteuid() == 0 else None
    mounts = _Mounts()
    mounts.system()
    mounts.python(py)
    check = ("import os,socket;assert os.getpid()==2;"
             "assert [n for _,n in socket.if_nameindex()]==['lo'];print('ok')")
    argv = [bwrap, *_namespaces(uid), "--die-with-parent", "--new-session", *mounts.args,
            "--remount-ro", "/", "--",
            str(Path(py.executable).resolve()), "-I", "-S", "-c", _SHIM,
            json.dumps({"rlimits": {}, "uid": uid, "gid": uid}),
            str(Path(py.executable).resolve()), "-I", "-S", "-c", check]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30, env={"PATH": "/usr/bin:/bin"})
    except (OSError, subprocess.TimeoutExpired) as e:
        return Probe(False, f"bubblewrap did not run ({e}): reinstall bubblewrap, "
                            "or grade with --no-sandbox (unisolated)")
    if out.returncode != 0 or out.stdout.strip() != "ok":
        err = (out.stderr.strip().splitlines() or ["no error message"])[-1][:200]
        return Probe(False, f"bubblewrap cannot build the sandbox here ({err}): allow unprivileged "
                            "user namespaces (sysctl kernel.unprivileged_userns_clone=1; on Ubuntu 24.04 "
                            "an AppArmor profile for bwrap), or grade with --no-sandbox (unisolated)")
    return Probe(True, "", "setuid" if uid is not None else "userns")


# -- internals ---------------------------------------------------------------------------------

def _namespaces(uid: int | None) -> list[str]:
    if uid is not None:
        # The grader is root: no user namespace (its uid map would make the run root outside);
        # the shim drops to ``uid`` with the one capability pair kept for that, then has none.
        return ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
                "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    # user, pid, net, ipc, uts, cgroup; no user namespace of its own inside (nested ones could not
    # unlock our read-only mounts, but they are one more kernel surface nobody's training needs)
    return ["--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop", "ALL"]


class _Mounts:
    """bwrap mount arguments, with every missing parent of a mount point created 0755."""

    def __init__(self):
        self.args: list[str] = []
        self._dirs: set[Path] = {Path("/")}
        self._bound: list[Path] = []  # mounts of real folders: their subfolders exist as they are

    def _parents(self, dest: Path) -> None:
        for parent in reversed(dest.parents):
            if parent in self._dirs or _under(parent, self._bound):
                continue
            self.args += ["--dir", str(parent)]
            self._dirs.add(parent)

    def bind(self, kind: str, src: Path, dest: Path | None = None) -> None:
        dest = dest or src
        self._parents(dest)
        self.args += [kind, str(src), str(dest)]
        self._bound.append(dest)
        self._dirs.add(dest)

    def tmpfs(self, dest: Path, perms: str, size_mb: int) -> None:
        self._parents(dest)
        self.args += ["--perms", perms, "--size", str(int(size_mb * MB)), "--tmpfs", str(dest)]
        self._dirs.add(dest)

    def system(self) -> None:
        self.bind("--ro-bind", Path("/usr"))
        for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            p = Path("/") / name
            if p.is_symlink():  # merged /usr: keep the link, not a second copy
                self.args += ["--symlink", os.readlink(p), str(p)]
            elif p.is_dir():
                self.bind("--ro-bind", p)
        self.bind("--ro-bind", Path("/etc"))
        self.args += ["--proc", "/proc", "--dev", "/dev"]
        self._bound += [Path("/proc"), Path("/dev")]

    def python(self, py: PythonInstall) -> None:
        for root in py.roots():
            if not _under(root, self._bound):  # a system Python is under /usr already
                self.bind("--ro-bind", root)

    def gpu(self) -> None:
        for dev in sorted(Path("/dev").glob("nvidia*")):
            self.args += ["--dev-bind", str(dev), str(dev)]
        self.bind("--ro-bind", Path("/sys"))


def _check_paths(policy: SandboxPolicy) -> None:
    kit = policy.kit_root.resolve()
    if not (kit / "harness").is_dir():
        raise SandboxError(f"kit root {kit} has no harness/ package: give the kit's root folder")
    protected = [kit / "harness", *policy.python.roots()]
    if policy.channel_dir is not None:
        protected.append(policy.channel_dir.resolve())
    for w in policy.writable:
        w = w.resolve()
        if not w.is_dir():
            raise SandboxError(f"writable folder {w} does not exist: create the run's work dir first")
        if w == Path("/") or any(_under(p, [w]) for p in protected):
            raise SandboxError(f"writable folder {w} contains the kit or the Python install: "
                               "give the run a work dir of its own")
        if _under(w, [kit]) and not _under(w, [kit / ".trainwreck"]):
            raise SandboxError(f"writable folder {w} is inside the kit: give the run a work dir "
                               "outside it (a grading's out dir)")
    for r in policy.readable:
        if not r.resolve().exists():
            raise SandboxError(f"readable path {r} does not exist: assemble the submission first")
        if _under(kit, [r.resolve()]):
            raise SandboxError(f"readable path {r} contains the kit root, which would expose "
                               "solutions/ and the reference cache: name the submission's folder only")


def _under(path: Path, roots) -> bool:
    return any(path == r or r in path.parents for r in roots)


def _outermost(paths: list[Path]) -> list[Path]:
    out: list[Path] = []
    for p in sorted(set(paths), key=lambda p: len(p.parts)):
        if not _under(p, out):
            out.append(p)
    return out
