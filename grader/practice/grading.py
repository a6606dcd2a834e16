"""Grading a practice workspace: the ordinary grading (``grader.grade.grade``) of the workspace's
editable files, recorded as an attempt in its state file, and shown as practice shows it.

What practice shows of a grading (:func:`view`) is each check's verdict and message, which name what
was observed ("host RSS grows 2.1 MB per step"), never what to change; not the checks' evidence
dicts, which hold thresholds and figures a message does not state, nor the reference's paths. The
full result.json is kept with the run dirs under ``$TRAINWRECK_HOME/practice/grades/``, outside the
workspace (the newest few per workspace); the copies a grading assembles to run (the exercise
folder with its manifest, and for throughput the reference fix) are removed once it is recorded.

:class:`GradingProcess` runs the same grading in a child process (``trainwreck grade --json``
inside the workspace), which `watch` can cancel: SIGTERM makes the harness end every rank's process
tree and the grading stop; whatever is still alive after that (a rank started in the instant
before the harness took over SIGTERM) is found by the run-dir marker every rank inherits and
ended, so a cancelled grading leaves nothing running and nothing on disk."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from grader.attempts import Attempt, throughput_score
from grader.practice import state as st
from grader.practice.state import PracticeError, PracticeState
from grader.practice.workspace import Workspace, editable
from harness.defaults import user_home
from harness.executor import Executor, Sandboxed

KEEP_GRADINGS = 5  # finished gradings kept on disk per workspace (their attempts stay in its attempt store)
ABANDONED_S = 6 * 3600  # an unfinished grading folder this old belongs to a grading that was killed
Progress = Callable[[str], None]
ASSEMBLED = ("submission", "throughput-broken", "throughput-reference")  # grader.grade's copies to run


def grades_root(ws_root: Path, slug: str) -> Path:
    key = hashlib.sha256(str(Path(ws_root).resolve()).encode()).hexdigest()[:10]
    return user_home() / "practice" / "grades" / f"{slug}-{key}"


def new_out_dir(ws: Workspace) -> Path:
    return grades_root(ws.root, ws.slug) / datetime.now().strftime("%Y%m%d-%H%M%S-%f")


def view(res: Any, ws: Workspace, attempt: Attempt | None, hints_total: int) -> dict[str, Any]:
    """What practice shows of a ``GradeResult`` (and `grade --json` prints in a workspace)."""
    tp = res.throughput or None
    return {
        "exercise": res.exercise, "workspace": str(ws.root), "attempt": attempt.n if attempt else None,
        "passed": res.passed, "score": round(res.score, 3), "environment_failure": res.environment_failure,
        "checks": [{"name": c.name, "passed": c.passed, "required": c.required, "environment": c.environment,
                    "message": c.message} for c in res.checks],
        "issues": [{"name": i.name, "title": i.title, "fixed": i.fixed} for i in res.issues],
        "throughput": ({"normalized": round(tp["normalized"], 3), "counted": bool(tp.get("counted", True))}
                       if tp and tp.get("normalized") is not None else None),
        "run_dir": _named(res, "main"),  # the run's per-rank logs, to read like the broken run's logs/
        "seconds": res.timings.get("total"),
        "hints": {"seen": ws.state.hints_seen, "total": hints_total},
        "passed_before": False,  # it had passed in an earlier attempt (set by `record`)
        # None: sandboxed, as every grading is unless asked; else why the code ran unisolated
        "unisolated": (None if res.isolation is None or res.isolation.sandboxed else res.isolation.reason),
    }


def _named(res: Any, role: str) -> str | None:
    """A run's folder as people find it: ``<out>/runs/<role>``, the link to the folder named by a
    random token (``grader.grade.opaque_run_dir``) that ``result.json`` records; else the recorded one."""
    real = res.run_dirs.get(role)
    link = Path(res.out_dir) / "runs" / role if res.out_dir else None
    if real and link is not None and link.is_symlink() and os.path.realpath(link) == os.path.realpath(real):
        return str(link)
    return real


def _attempt(res: Any, started_at: str) -> Attempt:
    """The grading as an attempt (numbered when recorded)."""
    return Attempt(n=0, started_at=started_at, finished_at=st.now(), status="done", passed=res.passed,
                   score=round(res.score, 4), submission_sha256=res.submission.sha256,
                   failed=tuple(res.failed_required), throughput=throughput_score(res.throughput),
                   environment_failure=res.environment_failure)


def record(ws: Workspace, res: Any, hints_total: int, started_at: str | None = None) -> dict[str, Any]:
    """Record the grading (started at ``started_at``, default now) as the workspace's next attempt;
    returns its view."""
    shown: dict[str, Any] = {}
    graded = _attempt(res, started_at or st.now())

    def add(s: PracticeState) -> None:
        a = st.add_attempt(ws.root, s, graded)
        was_passed = s.passed
        if res.passed and not s.passed:
            s.passed_at = a.finished_at
        ws.state = s
        shown.update(view(res, ws, a, hints_total))
        shown["passed_before"] = was_passed and not res.passed
        s.last_view = {"sha256": a.submission_sha256, "view": dict(shown)}

    ws.state = st.update(ws.root, add)
    return shown


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM unwinds the grading like Ctrl-C (the harness does the same while a job runs): every
    clean-up on the way out runs, and the grading is not recorded."""
    def handler(signum, frame):
        raise KeyboardInterrupt

    try:
        prev = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        prev = None
    try:
        yield
    finally:
        if prev is not None:
            signal.signal(signal.SIGTERM, prev)


def grade_workspace(ws: Workspace, *, repeats: int | None = None, device: str = "auto", out: Path | None = None,
                    progress: Progress = lambda s: None,
                    executor: Executor = Sandboxed()) -> tuple[Any, dict[str, Any]]:
    """Grade the workspace's editable files as the manifest asks and record the attempt."""
    from grader.grade import GradeOptions, grade

    ex = ws.require_script("grade")
    names = editable(ex)
    missing = [n for n in names if not (ws.root / n).is_file()]
    if missing:
        raise PracticeError(f"{ws.root} lacks {', '.join(missing)}; restore it with `trainwreck reset` (your other "
                            "files are backed up first) and grade again")
    out_dir = Path(out or new_out_dir(ws)).resolve()
    started_at = st.now()
    finished = False
    try:
        with sigterm_interrupts():
            res = grade(ex, GradeOptions(kind="workspace", workspace=ws.root, out_dir=out_dir, repeats=repeats,
                                         device=device, executor=executor), progress=progress)
            shown = record(ws, res, len(ex.manifest.hints), started_at)
        finished = True
    finally:
        # the assembled copies hold the manifest (hints, thresholds) and, for throughput, the
        # reference fix; the run dirs and result.json are all that re-judging and reading need
        for name in ASSEMBLED:
            shutil.rmtree(out_dir / name, ignore_errors=True)
        if out is None and not finished:
            shutil.rmtree(out_dir, ignore_errors=True)
    if out is None:
        prune(grades_root(ws.root, ws.slug))
    return res, shown


def prune(root: Path, keep: int = KEEP_GRADINGS) -> None:
    """Keep the newest ``keep`` finished gradings of a workspace; drop unfinished ones long abandoned."""
    if not root.is_dir():
        return
    finished = sorted(d for d in root.iterdir() if d.is_dir() and (d / "result.json").is_file())
    for d in finished[:-keep] if keep else finished:
        shutil.rmtree(d, ignore_errors=True)
    for d in root.iterdir():
        if d.is_dir() and not (d / "result.json").exists() and time.time() - d.stat().st_mtime > ABANDONED_S:
            shutil.rmtree(d, ignore_errors=True)


# ---- a grading in a child process, for watch ----
@dataclass(frozen=True)
class Outcome:
    code: int
    view: dict[str, Any] | None  # what `grade --json` printed (None: it failed before grading)
    error: str | None  # its one-line error, when it had one


@dataclass(frozen=True)
class Cancelled:
    seconds: float  # from the cancel to nothing of the grading left running
    ended_by_sweep: int  # processes still alive after the grading process exited, ended by pid


class GradingProcess:
    """`trainwreck grade --json` inside the workspace, in a child process: its stdout (the view) and
    stderr (progress, or one error line) go to files beside its grading folder (which the grading
    itself creates, empty: a used folder is refused), removed once read."""

    def __init__(self, ws: Workspace, device: str = "auto", repeats: int | None = None,
                 out: Path | None = None, executor: Executor = Sandboxed()):
        self.out = Path(out or new_out_dir(ws)).resolve()
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self._stdout = self.out.with_name(f".{self.out.name}.stdout.json")
        self._stderr = self.out.with_name(f".{self.out.name}.stderr.log")
        self._offset = 0
        cmd = [sys.executable, "-m", "grader.cli", "grade", "--json", "--workspace", str(ws.root),
               "--out", str(self.out), "--device", device, *(["--repeats", str(repeats)] if repeats else []),
               *([] if executor.sandboxed else ["--no-sandbox"])]  # chosen again there, as asked here
        with open(self._stdout, "wb") as out_f, open(self._stderr, "wb") as err_f:
            self.proc = subprocess.Popen(cmd, stdout=out_f, stderr=err_f, stdin=subprocess.DEVNULL, cwd=ws.root)
        self._prune_root = grades_root(ws.root, ws.slug) if out is None else None

    def poll(self) -> bool:
        """True once the grading has finished."""
        return self.proc.poll() is not None

    def new_lines(self) -> list[str]:
        """Progress lines written since the last call (whole lines only)."""
        try:
            with open(self._stderr, "rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        end = chunk.rfind(b"\n")
        if end < 0:
            return []
        self._offset += end + 1
        return chunk[:end].decode("utf-8", "replace").splitlines()

    def outcome(self) -> Outcome:
        code = self.proc.wait()
        text = self._stdout.read_text(encoding="utf-8", errors="replace").strip() if self._stdout.exists() else ""
        shown = None
        if text.startswith("{"):
            try:
                shown = json.loads(text)
            except ValueError:
                shown = None
        error = None
        if shown is None:
            lines = [ln for ln in self._stderr.read_text(errors="replace").splitlines() if ln.strip()] \
                if self._stderr.exists() else []
            error = lines[-1].removeprefix("error: ") if lines else f"the grading ended with exit code {code}"
        if not (self.out / "result.json").exists():
            shutil.rmtree(self.out, ignore_errors=True)  # it stopped before grading: nothing to keep
        self._forget_output()
        if self._prune_root is not None:
            prune(self._prune_root)
        return Outcome(code, shown, error)

    def _forget_output(self) -> None:
        for f in (self._stdout, self._stderr):
            f.unlink(missing_ok=True)

    def cancel(self, grace_s: float = 30.0) -> Cancelled:
        """Stop the grading: SIGTERM (the harness ends its ranks and the grading unwinds), SIGKILL
        after ``grace_s``; then end anything of it still alive and remove its folder."""
        import psutil

        t0 = time.monotonic()
        with _signals_ignored():  # a second Ctrl-C must not leave the grading half-ended
            try:
                seen = psutil.Process(self.proc.pid).children(recursive=True)
            except psutil.Error:
                seen = []
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=grace_s)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            left = [p for p in seen if _alive(p)] + _marked(self.out, self.proc.pid)
            uniq = {p.pid: p for p in left}
            for p in uniq.values():
                try:
                    p.kill()
                except psutil.Error:
                    pass
            psutil.wait_procs(list(uniq.values()), timeout=5)
            shutil.rmtree(self.out, ignore_errors=True)
            self._forget_output()
            for d in _reference_tmp(self.proc.pid):
                shutil.rmtree(d, ignore_errors=True)
        return Cancelled(round(time.monotonic() - t0, 3), len(uniq))


@contextmanager
def _signals_ignored() -> Iterator[None]:
    prev = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            prev[sig] = signal.signal(sig, signal.SIG_IGN)
        except ValueError:  # not the main thread
            pass
    try:
        yield
    finally:
        for sig, handler in prev.items():
            signal.signal(sig, handler)


def _alive(p) -> bool:
    import psutil

    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _reference_tmp(pid: int) -> list[Path]:
    """The reference run's scratch folders of grading process ``pid`` (``grader.grade.reference_run``)."""
    from grader.exercises import kit_root

    cache = kit_root() / ".trainwreck" / "cache"
    return list(cache.glob(f"*/*.tmp{pid}")) + list(cache.glob(f"*/*.tmp{pid}-src")) if cache.is_dir() else []


def _marked(out: Path, pid: int) -> list:
    """Live processes whose run dir (the environment every process of a launch inherits) lies in the
    grading's folder, or in the reference run's scratch folder of grading process ``pid``."""
    import psutil

    from harness.rundir import RUN_DIR_ENV

    mine = str(out)
    scratch = f".tmp{pid}"
    found = []
    for p in psutil.process_iter():
        try:
            if p.pid == os.getpid():
                continue
            d = p.environ().get(RUN_DIR_ENV, "")
            if d and (d == mine or d.startswith(mine + os.sep) or Path(d).name.endswith(scratch)):
                if p.status() != psutil.STATUS_ZOMBIE:
                    found.append(p)
        except psutil.Error:
            continue
    return found


def spawn(ws: Workspace, device: str = "auto", repeats: int | None = None,
          executor: Executor = Sandboxed()) -> GradingProcess:
    """The grading `watch` starts on a save (tests replace this with a fake)."""
    return GradingProcess(ws, device=device, repeats=repeats, executor=executor)
