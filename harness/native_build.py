"""Builds and finds the collective trace's C++ kernel (``harness/native/c10d_trace.cpp``).

    python -m harness.native_build          build it for this Python and this torch (make setup does)
    python -m harness.native_build --check  say whether a build for them is there (exit 1 if not)

One ``g++`` call against the headers and libraries in torch's wheel (about 15 s on the 2-core
machine; no ninja, no ``torch.utils.cpp_extension.load``). The file's name carries a hash of the
source, the torch version and the Python ABI, so a build for another torch is never loaded: where
none matches, the rank traces with the Python kernel (``harness.collectives``), which records the
same fields at a higher cost per collective. ``TRAINWRECK_TRACE=python`` asks for the Python kernel
even where a build exists.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.machinery
import importlib.util
import os
import shlex
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from types import ModuleType

SOURCE = Path(__file__).resolve().parent / "native" / "c10d_trace.cpp"
BUILD_DIR = SOURCE.parent / "build"
NAME = "_c10d_trace"  # the module name the source's PYBIND11_MODULE defines
TRACE_ENV = "TRAINWRECK_TRACE"  # "python": the Python kernel even where a build exists


def _key() -> str:
    import torch

    h = hashlib.sha256(SOURCE.read_bytes())
    h.update(f"{torch.__version__}|{sys.version}|{sysconfig.get_config_var('EXT_SUFFIX')}".encode())
    return h.hexdigest()[:16]


def target() -> Path:
    return BUILD_DIR / f"{NAME}-{_key()}{sysconfig.get_config_var('EXT_SUFFIX')}"


def command(out: Path) -> list[str]:
    import torch
    from torch.utils import cpp_extension

    lib = cpp_extension.library_paths()[0]
    return [
        os.environ.get("CXX", "g++"), "-shared", "-fPIC", "-O2", "-std=c++20",
        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
        f"-DTORCH_EXTENSION_NAME={NAME}",
        *(f"-I{p}" for p in cpp_extension.include_paths()),
        f"-I{sysconfig.get_paths()['include']}",
        str(SOURCE), "-o", str(out),
        f"-L{lib}", f"-Wl,-rpath,{lib}", "-ltorch", "-ltorch_cpu", "-lc10", "-ltorch_python",
    ]


def build() -> Path:
    """Compiles into a temporary file beside the target and renames it: a failed or interrupted
    build leaves nothing a rank would load."""
    out = target()
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=".building-", suffix=out.suffix)
    os.close(fd)
    try:
        cmd = command(Path(tmp))
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"{shlex.join(cmd[:1])} failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
        # mkstemp made it 0600: a sandboxed rank runs as another user (docs/sandbox.md) and loads it too
        os.chmod(tmp, 0o755)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    for old in BUILD_DIR.glob(f"{NAME}-*"):  # builds for another source or torch
        if old != out:
            old.unlink(missing_ok=True)
    return out


def load() -> tuple[ModuleType | None, str]:
    """(the module, "") or (None, why not). Imports torch (the module links against it)."""
    if os.environ.get(TRACE_ENV, "") == "python":
        return None, f"{TRACE_ENV}=python"
    try:
        path = target()
    except Exception as e:  # no torch, or the source is missing from this install
        return None, f"no build: {e!r}"
    if not path.exists():
        return None, f"no build for this torch (python -m harness.native_build makes {path.name})"
    try:
        spec = importlib.util.spec_from_loader(
            NAME, importlib.machinery.ExtensionFileLoader(NAME, str(path)))
        if spec is None or spec.loader is None:  # (a spec made from a loader has both)
            return None, f"{path.name} did not load: no module spec"
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    except Exception as e:  # built against a library this process does not have
        return None, f"{path.name} did not load: {e!r}"
    return mod, ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.native_build", description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="only say whether a build for this torch is there")
    args = ap.parse_args(argv)
    if args.check:
        mod, why = load()
        print(f"native collective trace: {'ok' if mod else why}")
        return 0 if mod else 1
    if target().exists():
        print(f"native collective trace: up to date ({target().name})", file=sys.stderr)
        return 0
    t = time.perf_counter()
    try:
        out = build()
    except (OSError, RuntimeError) as e:
        print(f"native collective trace not built, runs trace collectives in Python: {e}", file=sys.stderr)
        return 1
    print(f"native collective trace: built {out.name} in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
