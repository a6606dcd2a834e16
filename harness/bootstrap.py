"""Rank entry point: ``python -m harness.bootstrap SCRIPT [ARGS...]``, started by the elastic
launcher once per rank. Installs the instrumentation, then runs SCRIPT as ``__main__`` with
``runpy``, so an unmodified torch script is observed without its cooperation.

Without ``TRAINWRECK_RUN_DIR`` in the environment it only runs the script.

In a sandboxed launch (``TRAINWRECK_CHANNEL`` set: ``harness.channel.active()``) the run dir is not
visible: records, logs, stacks and the final parameters go to the parent over the channel, which
signs and stores them; what the recorder writes to files itself goes to a scratch dir in the
sandbox's private ``/tmp`` first. No key is in this process then (docs/sandbox.md).
"""

from __future__ import annotations

import faulthandler
import json
import os
import runpy
import signal
import socket
import sys
import time
from pathlib import Path

from harness import channel, rundir

STACK_SIGNAL = signal.SIGUSR1
SCRATCH = Path("/tmp/.trainwreck")  # sandboxed: the recorder's own files, before they are sent
SETTINGS_ARG = "--settings-fd="
# What the script sees of the harness: rundir.VISIBLE_ENV; the run's settings come from the environment the
# launcher gave (unsandboxed) or from the parent over the channel (sandboxed: in no environment
# block at all), and leave before the script runs, /proc/self/environ included, which keeps the
# block a process was exec'd with whatever os.environ says.
AGENT_ONLY = frozenset({"TORCH_DISABLE_SHARE_RDZV_TCP_STORE"})  # read by torchrun's agent, never by a rank
SHOW = rundir.SHOW_PREFIX
SETTINGS_MAX = 60_000  # under a pipe's 64 KiB buffer: written whole before the exec, without a reader


def _attempt_header(attempt: int) -> bytes:
    return f"=== attempt {attempt} (pid {os.getpid()}) ===\n".encode()


def _redirect_output(rank_dir: Path, attempt: int) -> None:
    """Point fds 1 and 2 at the rank's log files, so C++ output (gloo, NCCL) lands there too."""
    for fd, name in ((1, rundir.STDOUT), (2, rundir.STDERR)):
        f = open(rank_dir / name, "ab", buffering=0)
        f.write(_attempt_header(attempt))
        os.dup2(f.fileno(), fd)
        f.close()


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m harness.bootstrap SCRIPT [ARGS...]", file=sys.stderr)
        return 2
    if argv[0].startswith(SETTINGS_ARG):
        _take_settings(int(argv[0][len(SETTINGS_ARG):]))
        argv = argv[1:]
    else:
        _settle_environment(argv)  # returns only when no exec is needed
    script, args = argv[0], argv[1:]
    run_dir_s = os.environ.get(rundir.RUN_DIR_ENV)
    if not run_dir_s:
        return _run_script(script, args)

    sandboxed = channel.active()
    run_dir = SCRATCH if sandboxed else Path(run_dir_s)
    rank = int(os.environ.get("RANK", "0"))
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    # The key must not be visible to the script, nor to anything it starts (sandboxed: there is none).
    key = os.environ.pop(rundir.KEY_ENV, "")
    rdir = rundir.rank_dir(run_dir, rank)
    rdir.mkdir(parents=True, exist_ok=True)
    if os.environ.pop("TRAINWRECK_CAPTURE", "1") == "1":
        if sandboxed:
            channel.redirect_output(_attempt_header(attempt))
        else:
            _redirect_output(rdir, attempt)

    stacks = channel.open_stream(rundir.STACKS) if sandboxed else open(rdir / rundir.STACKS, "a", buffering=1)
    faulthandler.register(STACK_SIGNAL, file=stacks, all_threads=True, chain=False)
    # A fatal signal (a segfault in an extension, an abort from C++ at teardown) leaves every
    # thread's Python stack in the same file before the process dies as it would have.
    faulthandler.enable(file=stacks, all_threads=True)
    # Before torch is imported (seconds on a busy machine): from here on the watchdog knows this
    # rank's pid, so it can ask for its stacks, or see that it died, even during the imports.
    boot = channel.open_writer(rdir / rundir.EVENTS, key)
    boot.write({"kind": "boot", "attempt": attempt, "t": time.time(), "pid": os.getpid(), "rank": rank})
    boot.close()

    import torch

    from harness import audit, fetches, instrument  # imports torch: after the cheap set-up above

    pg_timeout = os.environ.pop(rundir.PG_TIMEOUT_ENV, "")
    rec = instrument.install(run_dir, rank, key, attempt, float(pg_timeout) if pg_timeout else None)
    prof = _install_profiler(rec)
    fetches.install()  # what every DataLoader fetches, whatever the dataset
    rec.event(
        "start", pid=os.getpid(), rank=rank, local_rank=int(os.environ.get("LOCAL_RANK", "0")),
        world_size=int(os.environ.get("WORLD_SIZE", "1")), host=socket.gethostname(),
        script=os.path.abspath(script), argv=args, torch=torch.__version__,
        cuda=torch.cuda.is_available(),
        # which kernel traced the collectives, and why not the C++ one where it was Python's
        trace=getattr(rec.tracer, "kind", None), trace_why=getattr(rec.tracer, "why_python", None) or None,
    )
    _threads(torch)
    for name in [k for k in os.environ if rundir.is_setting(k)]:
        del os.environ[name]  # read by now; nor do the script's own children inherit them
    # Last before the script: what it does that a fix has no reason to, seen as it happens
    audit.install(lambda what, detail, where: rec.event("audit", what=what, detail=detail, where=where),
                  script, os.getcwd())
    status, code, error = "ok", 0, None
    try:
        code = _run_script(script, args)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        status = "ok" if code == 0 else "sysexit"
    except BaseException as e:  # the script's own failure: record it, then fail as it would have
        status, code, error = "exception", 1, instrument.describe_exception(e)
        sys.stderr.write(error)
    if rec.tracer is not None:  # collectives that completed after the last look at them
        try:
            rec.tracer.settle()
        except Exception as e:  # never let the trace mask the script's outcome
            sys.stderr.write(f"trainwreck: collective trace: {e!r}\n")
    if prof is not None:  # before the final save: the harness's own torch.save is not the script's
        try:
            prof.finish()
        except Exception as e:  # never let profiling mask the script's outcome
            sys.stderr.write(f"trainwreck --profile: {instrument.describe_exception(e)}")
    try:
        saved = rec.save_final_params()
        path = rec.dir / rundir.FINAL_PARAMS
        if sandboxed and path.exists():  # the parent stores it where no process of the run can reach
            saved["params_sha256"] = channel.send_file(rundir.FINAL_PARAMS, path.read_bytes())
            path.unlink()
    except Exception as e:  # never let saving mask the script's outcome
        saved = {"save_error": repr(e)}
    rec.event("exit", status=status, code=code, steps=rec.step, error=error, **saved)
    sys.stdout.flush()
    sys.stderr.flush()
    if instrument.kept_process_groups():
        leave(code)
    return code


def leave(code: int) -> None:
    """Exit as the interpreter would (wait for the script's non-daemon threads, run its atexit
    handlers, collect what it left, flush), but without tearing down the process groups the
    harness kept (``instrument.keep_process_groups``): a gloo group destroyed while a worker thread
    still frees a work's tensors deadlocks on the GIL, and at interpreter shutdown it can abort."""
    import atexit
    import gc
    import threading

    for t in threading.enumerate():
        if t is not threading.main_thread() and not t.daemon:
            t.join()
    try:
        atexit._run_exitfuncs()
    finally:
        gc.collect()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def _settle_environment(argv: list[str]) -> None:
    """The run's settings in hand, and an environment block without them. Unsandboxed they are in
    the environment the launcher gave; sandboxed the parent hands them over the channel. Where the
    block holds what the script must not see (a setting, a variable only torchrun's agent reads) or
    lacks what every role shows (``TRAINWRECK_SHOW_*``), this rank starts again, the same pid and
    argv, in the environment it should have had, the settings on a pipe (``--settings-fd=N``)."""
    if not os.environ.get(rundir.RUN_DIR_ENV):
        return  # not under the harness: the script only
    settings = {k: v for k, v in os.environ.items() if rundir.is_setting(k)}
    in_block = bool(settings)
    if channel.active():
        try:
            settings.update(channel.fetch_settings())
        except OSError as e:
            raise SystemExit(f"trainwreck: this rank could not get the run's settings from the parent: {e}") from None
    shown = {k[len(SHOW):]: v for k, v in settings.items() if k.startswith(SHOW) and len(k) > len(SHOW)}
    if not (in_block or any(k in os.environ for k in AGENT_ONLY)
            or any(os.environ.get(k) != v for k, v in shown.items())):
        _apply(settings)
        return
    env = {k: v for k, v in os.environ.items() if not rundir.is_setting(k) and k not in AGENT_ONLY}
    env.update(shown)
    data = json.dumps(settings).encode()
    if len(data) > SETTINGS_MAX:
        raise SystemExit(f"trainwreck: the run's settings are {len(data)} bytes, over {SETTINGS_MAX}: "
                         "pass fewer faults or files to watch")
    r, w = os.pipe()
    os.write(w, data)
    os.close(w)
    os.set_inheritable(r, True)
    lead = sys.orig_argv[:len(sys.orig_argv) - len(argv)]  # the interpreter and its flags, -m harness.bootstrap
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [*lead, f"{SETTINGS_ARG}{r}", *argv], env)


def _take_settings(fd: int) -> None:
    """The settings ``_settle_environment`` sent, back in ``os.environ`` (the process's own copy:
    /proc/self/environ does not show them) for the harness to read, then removed before the script."""
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    os.close(fd)
    _apply(json.loads(b"".join(chunks)))


def _apply(settings: dict[str, str]) -> None:
    for k, v in settings.items():
        if not k.startswith(SHOW):
            os.environ[k] = v
    _malloc(os.environ.get(rundir.MMAP_THRESHOLD_ENV))


M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter


def _malloc(threshold: str | None) -> None:
    """glibc's mmap threshold fixed as MALLOC_MMAP_THRESHOLD_ would (dynamic adjustment off), without
    a variable in the environment; forked children (DataLoader workers) keep it."""
    if not threshold:
        return
    import ctypes

    try:
        ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, int(threshold))
    except (OSError, AttributeError, ValueError):  # not glibc: the measurement is as without it
        pass


def _threads(torch) -> None:
    n = os.environ.pop(rundir.THREADS_ENV, "")
    if n:
        torch.set_num_threads(int(n))


def _install_profiler(rec):
    """Only under ``trainwreck run --profile``: without it nothing is imported or installed."""
    schedule = os.environ.pop(rundir.PROFILE_ENV, "")
    if not schedule:
        return None
    from harness import profiler

    return profiler.install(rec, json.loads(schedule))


def _run_script(script: str, args: list[str]) -> int:
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
