"""Running one hostile case end to end, and everything the suite measures around it.

For a case: snapshot what a submission must never change (the kit, the reference cache, the
virtualenv's and the user's site-packages, the user's trainwreck home, an earlier grading left
beside it); grade the hostile workspace in a process of its own (``grade_one.py``), watched from
outside for its wall time and its own peak RSS; wait for anything that outlived it to act; check
the verdict, the result.json on disk and a regrade of it; look for processes left behind by any
trace they leave (command line, working folder, open files, the harness's variable); then grade
an honest fix into a fresh folder, which must still pass; then compare the snapshots, put the kit
back where it was changed, and clean up. Every finding is one line in ``CaseReport.problems``;
the case is stopped when there are none.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import site
import subprocess
import sys
import sysconfig
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from tests.adversarial.cases import Case, honest_workspace, workspace
from tests.conftest import leftover_ranks

HERE = Path(__file__).resolve().parent
GRADE_ONE = HERE / "grade_one.py"
CANARY = "ATTACK-SUCCEEDED-"
CONTROL = set(range(0x00, 0x20)) - {0x09, 0x0A} | {0x7F} | set(range(0x80, 0xA0))
HONEST_LIMIT_S = 420.0  # an honest grading, the reference run included when its cache is cold
REGRADE_LIMIT_S = 180.0
REAL_USER_SITE = Path(site.getusersitepackages())  # the suite's own user's, before any HOME is changed
VENV_SITE = Path(sysconfig.get_paths()["purelib"])
KIT_TREES = ("exercises", "solutions", "harness", "grader", "rubrics")


# -- a grading in a process of its own -------------------------------------------------------------

@dataclass
class Child:
    summary: dict[str, Any] | None
    returncode: int | None
    wall_s: float
    peak_rss_mb: float  # the grader process's own high-water mark (VmHWM), not its ranks'
    timed_out: bool
    log_tail: str

    @property
    def result(self) -> dict[str, Any] | None:
        return (self.summary or {}).get("result")

    def describe(self) -> str:
        if self.timed_out:
            return f"did not finish within its limit ({self.wall_s:.0f} s): hung or stopped"
        if self.summary is None:
            how = f"killed by signal {-self.returncode}" if (self.returncode or 0) < 0 else f"exit {self.returncode}"
            return f"died without a result ({how}): {self.log_tail[-300:]!r}"
        s = self.summary
        if s["outcome"] != "graded":
            return f"{s['outcome']}: {s.get('error_type')}: {s.get('error')}"
        r = s["result"]
        failed = [c["name"] for c in r["checks"] if not c["passed"]]
        return (f"passed={r['passed']} score={r['score']} environment_failure={r['environment_failure']} "
                f"failed={failed}")


def _vm_hwm_mb(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def run_child(args: list[str], cwd: Path, env: dict[str, str], limit_s: float, name: str) -> Child:
    summary = cwd / f".{name}.summary.json"
    log_path = cwd / f"{name}.log"
    t0 = time.time()
    with open(log_path, "wb") as log:
        p = subprocess.Popen([sys.executable, str(GRADE_ONE), *args, str(summary)], cwd=cwd, env=env,
                             stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True)
    peak, timed_out = 0.0, False
    while p.poll() is None:
        hwm = _vm_hwm_mb(p.pid)
        if hwm is not None:
            peak = max(peak, hwm)
        if time.time() - t0 > limit_s:
            timed_out = True
            for sig in (signal.SIGCONT, signal.SIGKILL):  # a stopped grader is woken to die
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    pass
            p.wait()
            break
        time.sleep(0.1)
    wall = time.time() - t0
    data = json.loads(summary.read_text()) if summary.exists() and not timed_out else None
    tail = log_path.read_text(errors="replace")[-2000:] if log_path.exists() else ""
    return Child(data, p.returncode, wall, round(peak, 1), timed_out, tail)


# -- processes left behind ---------------------------------------------------------------------------

def stragglers(folder: Path) -> list[psutil.Process]:
    """Live processes that belong to a case's folder by any trace: the conftest's rule (command
    line, TRAINWRECK_RUN_DIR), or a working folder, an open file or a command-line string inside
    it (a daemon that cleared its environment and moved to / still names its target somewhere,
    and these attacks do on purpose; one that names nothing would only be found by its start
    time, which other users' processes share, so the suite does not guess)."""
    marker = str(folder.resolve())
    found = {p.pid: p for p in leftover_ranks(marker)}
    me = os.getpid()
    for p in psutil.process_iter(["cmdline", "status"]):
        if p.pid == me or p.pid in found or p.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            if any(marker in a for a in p.info["cmdline"] or []) or p.cwd().startswith(marker):
                found[p.pid] = p
                continue
            if any(f.path.startswith(marker) for f in p.open_files()):
                found[p.pid] = p
        except psutil.Error:
            continue
    return list(found.values())


def describe_process(p: psutil.Process) -> str:
    try:
        return f"pid {p.pid} ({' '.join(p.cmdline())[:160]!r})"
    except psutil.Error:
        return f"pid {p.pid}"


def end(procs: list[psutil.Process]) -> None:
    for p in procs:
        try:
            p.resume()
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=5)


def wait_for_none(folder: Path, grace_s: float) -> list[psutil.Process]:
    deadline = time.time() + grace_s
    left = stragglers(folder)
    while left and time.time() < deadline:
        time.sleep(0.5)
        left = stragglers(folder)
    return left


# -- what a submission must never change -------------------------------------------------------------

def _sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _walk(root: Path, skip=lambda rel: False) -> dict[str, str]:
    """relative path -> sha256 (a symlink: its target; anything else: its kind), never following
    links and never opening anything but regular files."""
    out: dict[str, str] = {}
    if not root.is_dir():
        return out
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in filenames + [d for d in dirnames if (Path(dirpath) / d).is_symlink()]:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if skip(rel) or name.endswith(".pyc"):
                continue
            st = path.lstat()
            if path.is_symlink():
                out[rel] = "symlink -> " + os.readlink(path)
            elif path.is_file():
                out[rel] = _sha(path) if st.st_size <= 256 << 20 else f"size {st.st_size} mtime {st.st_mtime_ns}"
            else:
                out[rel] = f"special file {oct(st.st_mode)}"
    return out


def user_site(home: Path) -> Path:
    """Where Python looks for the user's site-packages of a process whose HOME is ``home``."""
    return home / ".local" / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"


def _cache_skip(rel: str) -> bool:
    top = rel.split("/")[1] if "/" in rel else ""
    return ".tmp" in top or top.endswith("-src")


@dataclass
class Snapshot:
    areas: dict[str, dict[str, str]]
    blobs: dict[str, bytes] = field(default_factory=dict)  # "area/rel" -> bytes, to put back


def snapshot(kit: Path, home: Path, tw_home: Path, victim: Path | None) -> Snapshot:
    areas = {
        "kit": {f"{t}/{k}": v for t in KIT_TREES for k, v in _walk(kit / t).items()},
        "reference cache": _walk(kit / ".trainwreck" / "cache", _cache_skip),
        "virtualenv site-packages": {p.name: (_sha(p) if p.is_file() else "dir") for p in VENV_SITE.iterdir()},
        "user site-packages": _walk(REAL_USER_SITE),
        "the grader's user site-packages (in its HOME)": _walk(user_site(home)),
        "trainwreck home": _walk(tw_home),
    }
    if victim is not None:
        areas["earlier grading"] = _walk(victim)
    blobs = {}
    for rel in areas["kit"]:
        blobs[f"kit/{rel}"] = (kit / rel).read_bytes()
    return Snapshot(areas, blobs)


def diff(before: Snapshot, after: Snapshot, ignore_new_in: tuple[str, ...] = ("reference cache",)) -> list[str]:
    """One line per area that changed. New files in the reference cache are a new reference run
    (a cold cache, or a harness edit changing its key): judged by whether old ones changed."""
    lines = []
    for area, old in before.areas.items():
        new = after.areas.get(area, {})
        changed = sorted(k for k in old if k in new and new[k] != old[k])
        removed = sorted(k for k in old if k not in new)
        added = [] if area in ignore_new_in else sorted(k for k in new if k not in old)
        if changed or removed or added:
            parts = [f"{what} {', '.join(ks[:4])}{' ...' if len(ks) > 4 else ''}"
                     for what, ks in (("changed", changed), ("removed", removed), ("added", added)) if ks]
            lines.append(f"{area}: {'; '.join(parts)}")
    return lines


def restore(kit: Path, before: Snapshot, after: Snapshot) -> None:
    """Put the kit, the cache and the site-packages back as they were (the case's own folders are
    thrown away with it)."""
    old, new = before.areas["kit"], after.areas["kit"]
    for rel in old:
        if new.get(rel) != old[rel]:
            (kit / rel).parent.mkdir(parents=True, exist_ok=True)
            (kit / rel).write_bytes(before.blobs[f"kit/{rel}"])
    for rel in set(new) - set(old):
        (kit / rel).unlink(missing_ok=True)
    cache = kit / ".trainwreck" / "cache"
    old, new = before.areas["reference cache"], after.areas["reference cache"]
    for rel in {r for r in old if new.get(r) != old[r]}:
        entry = cache / "/".join(rel.split("/")[:2])
        shutil.rmtree(entry, ignore_errors=True)  # the next grading runs the reference again
    for area, root in (("virtualenv site-packages", VENV_SITE), ("user site-packages", REAL_USER_SITE)):
        for rel in set(after.areas[area]) - set(before.areas[area]):
            p = root / rel
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() and not p.is_symlink() else p.unlink(missing_ok=True)


# -- an earlier grading, for the attacks on other gradings -------------------------------------------

def place_victim(src: Path, dest: Path) -> Path:
    """A copy of an earlier (failed) grading at ``dest``, its result.json naming the copy's runs."""
    shutil.copytree(src, dest, symlinks=True)
    res = json.loads((dest / "result.json").read_text())
    res["run_dirs"] = {k: (v.replace(str(src), str(dest)) if v.startswith(str(src)) else v)
                       for k, v in res["run_dirs"].items()}
    res["out_dir"] = str(dest)
    (dest / "result.json").write_text(json.dumps(res, indent=2, sort_keys=True) + "\n")
    return dest


# -- the case ------------------------------------------------------------------------------------------

@dataclass
class CaseReport:
    id: str
    exercise: str
    klass: str
    mode: str  # sandboxed | unisolated
    hostile: dict[str, Any] = field(default_factory=dict)
    honest: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    scored_above_zero: bool = False
    fooled_checks: list[str] = field(default_factory=list)
    left_behind: list[str] = field(default_factory=list)
    changed_later: list[str] = field(default_factory=list)  # honest verdict, kit, cache, sites, homes, victim
    canaries: list[str] = field(default_factory=list)
    isolation: Any = None  # what result.json says about the sandbox, once grading says
    wall_s: float = 0.0

    @property
    def stopped(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "stopped": self.stopped}


def _child_json(c: Child) -> dict[str, Any]:
    r = c.result or {}
    return {"outcome": (c.summary or {}).get("outcome", "hung" if c.timed_out else "died"),
            "passed": r.get("passed"), "score": r.get("score"),
            "environment_failure": r.get("environment_failure"),
            "failed": {x["name"]: x["message"][:300] for x in r.get("checks", []) if not x["passed"]},
            "error": (c.summary or {}).get("error"), "wall_s": round(c.wall_s, 1),
            "peak_rss_mb": c.peak_rss_mb, "timed_out": c.timed_out, "returncode": c.returncode,
            "describe": c.describe()}


def judge_verdict(case: Case, c: Child, report: CaseReport) -> None:
    """The hostile grading's verdict against the case's expectation."""
    e = case.expect
    if c.timed_out:
        report.problems.append(f"the grader {c.describe()}")
        return
    if c.summary is None:
        report.problems.append(f"the grader {c.describe()}")
        return
    s = c.summary
    if s["outcome"] == "refused":
        if not any(w.lower() in s["error"].lower() for w in e.refused):
            report.problems.append(f"the grading refused the submission with a line that does not name what "
                                   f"happened (expected one of {e.refused}): {s['error']!r}")
        return
    if s["outcome"] == "error":
        report.problems.append(f"the grading raised {s['error_type']}: {s['error']} (no verdict)")
        return
    r = s["result"]
    checks = {x["name"]: x for x in r["checks"]}
    if r["passed"] or r["score"] > 0:
        report.scored_above_zero = r["score"] > 0 or r["passed"]
        report.problems.append(f"the hostile submission passed={r['passed']} with score {r['score']}")
    for name in e.not_passing:
        if checks.get(name, {}).get("passed"):
            report.fooled_checks.append(name)
            report.problems.append(f"{name} passed: the attack fooled it ({checks[name]['message'][:200]})")
    raised = {f.get("kind") for f in r.get("flags") or [] if isinstance(f, dict)}
    missing = [k for k in e.flags if k not in raised]
    if missing and report.mode == "sandboxed":
        report.problems.append(f"no {', '.join(missing)} flag raised (raised: {', '.join(sorted(map(str, raised))) or 'none'})")
    if r["environment_failure"] and not e.environment_ok:
        env = [f"{x['name']}: {x['message'][:200]}" for x in r["checks"] if x.get("environment")]
        report.problems.append(f"graded as an environment failure, not the submission's: {env}")
    elif e.check is not None and not (r["environment_failure"] and e.environment_ok):
        got = checks.get(e.check)
        if got is None or got["passed"]:
            report.problems.append(f"{e.check} did not fail ({got['message'][:200] if got else 'not judged'})")
        elif e.words and not any(w.lower() in got["message"].lower() for w in e.words):
            report.problems.append(f"{e.check} failed, but its message does not name what happened (expected one "
                                   f"of {e.words}): {got['message'][:300]!r}")
    elif e.check is None and e.refused:
        report.problems.append("the grading went ahead where it should have refused the workspace")
    bad = [x["name"] for x in r["checks"] if any(ord(ch) in CONTROL for ch in x["message"])]
    if bad:
        report.problems.append(f"control characters reached the messages of {bad}")


def run_case(case: Case, folder: Path, kit: Path, mode: str, victim_src: Path | None,
             editable: list[str]) -> CaseReport:
    """Everything the suite does for one case; the report lists every finding."""
    t0 = time.time()
    report = CaseReport(case.id, case.exercise, case.klass, mode)
    folder = folder.resolve()
    home = folder / "home"
    home.mkdir(parents=True)
    tw_home = Path(os.environ.get("TRAINWRECK_HOME") or folder / "tw-home")
    tw_home.mkdir(parents=True, exist_ok=True)
    (tw_home / "victim.txt").write_text("an interviewer's notes on an earlier candidate\n")
    env = {**os.environ, "HOME": str(home), "TRAINWRECK_HOME": str(tw_home)}
    env.pop("TRAINWRECK_KEY", None)
    flag = ["--sandbox"] if mode == "sandboxed" else []
    victim = place_victim(victim_src, folder / "victim" / "out") if case.victim and victim_src else None
    victim_before = (victim / "result.json").read_bytes() if victim else None
    ws = workspace(case, kit, folder / "hostile-ws")
    before = snapshot(kit, home, tw_home, victim)
    try:
        _hostile(case, folder, ws, env, flag, report)
        if victim is not None:
            _victim(victim, victim_before, folder, env, report)
        left = wait_for_none(folder, 5.0)
        if left:
            report.left_behind = [describe_process(p) for p in left]
            report.problems.append(f"processes left behind by the hostile grading: {report.left_behind}")
            # a daemon meant to harm the next grading is left to try: the honest grading shows
            # whether it can; it is ended after that
        mid = snapshot(kit, home, tw_home, victim)
        for line in diff(before, mid):
            report.changed_later.append(line)
            report.problems.append(f"changed by the hostile grading (later gradings would see it): {line}")
        _honest(case, folder, kit, env, flag, editable, report)
    finally:
        left = stragglers(folder)
        if left:
            extra = [describe_process(p) for p in left if describe_process(p) not in report.left_behind]
            if extra:
                report.left_behind += extra
                report.problems.append(f"processes still alive after the honest grading: {extra}")
            end(left)
        after = snapshot(kit, home, tw_home, victim)
        for line in diff(before, after):
            if line not in report.changed_later:
                report.changed_later.append(line)
                report.problems.append(f"changed by the end of the case: {line}")
        restore(kit, before, after)
        for p in sorted(folder.rglob(f"{CANARY}*")):
            first = (p.read_text(errors="replace").strip().splitlines() or [""])[0][:160] if p.is_file() else ""
            report.canaries.append(f"{p.name[len(CANARY):]} ({p.parent.relative_to(folder)}){': ' + first if first else ''}")
        if report.canaries:
            report.problems.append(f"attack steps that reached something real: {report.canaries}")
        _drop_large_files(folder)
        report.wall_s = round(time.time() - t0, 1)
    return report


def _hostile(case: Case, folder: Path, ws: Path, env: dict[str, str], flag: list[str], report: CaseReport) -> None:
    out = folder / "hostile" / "out"
    c = run_child(["grade", case.exercise, str(ws), str(out), *flag], folder, env, case.limit_s, "hostile")
    report.hostile = _child_json(c)
    if c.result is not None:
        report.isolation = c.result.get("isolation", c.result.get("sandbox"))
        if report.mode == "sandboxed" and isinstance(report.isolation, dict) \
                and report.isolation.get("sandboxed") is False:
            report.problems.append(f"graded without the sandbox although it was asked for: {report.isolation}")
    judge_verdict(case, c, report)
    if c.wall_s > case.limit_s and not c.timed_out:
        report.problems.append(f"the hostile grading took {c.wall_s:.0f} s, over its {case.limit_s:.0f} s limit")
    if c.peak_rss_mb > case.grader_rss_mb:
        report.problems.append(f"the grader's own memory reached {c.peak_rss_mb:.0f} MiB (limit "
                               f"{case.grader_rss_mb:.0f} MiB): it grows with what the submission wrote")
    time.sleep(case.settle_s)  # a daemon that outlived the run gets its chance to forge
    result_json = out / "result.json"
    if c.result is not None:
        on_disk = json.loads(result_json.read_text()) if result_json.is_file() else None
        if on_disk != c.result:
            report.problems.append("result.json on disk is not what the grading returned: rewritten after the fact"
                                   if on_disk is not None else "result.json is gone after the grading")
        if on_disk is not None:
            again = run_child(["regrade", str(result_json)], folder, env, REGRADE_LIMIT_S, "regrade")
            r = again.result
            if r is None:
                if again.summary is None or again.summary.get("outcome") != "refused":
                    report.problems.append(f"regrading the stored result {again.describe()}")
            elif (r["passed"], r["score"]) != (c.result["passed"], c.result["score"]):
                report.scored_above_zero = report.scored_above_zero or r["passed"] or r["score"] > 0
                report.problems.append(f"`regrade` of the stored result says passed={r['passed']} score={r['score']} "
                                       f"where the grading said passed={c.result['passed']} score={c.result['score']}: "
                                       "the verdict was forged after the fact")
    if case.same_out_refused:
        again = run_child(["grade", case.exercise, str(ws), str(out), *flag], folder, env, 120, "same-out")
        if (again.summary or {}).get("outcome") != "refused":
            report.problems.append(f"grading again into the same folder was not refused: {again.describe()}")


def _victim(victim: Path, before: bytes | None, folder: Path, env: dict[str, str], report: CaseReport) -> None:
    if (victim / "result.json").read_bytes() != before:
        report.problems.append("the earlier grading's result.json was rewritten")
    again = run_child(["regrade", str(victim / "result.json")], folder, env, REGRADE_LIMIT_S, "victim-regrade")
    r = again.result
    if r is None or r["passed"] or r["score"] > 0:
        report.changed_later.append(f"earlier grading regraded: {again.describe()}")
        report.problems.append(f"regrading the earlier grading no longer fails as it did: {again.describe()}")


def _honest(case: Case, folder: Path, kit: Path, env: dict[str, str], flag: list[str], editable: list[str],
            report: CaseReport) -> None:
    ws = honest_workspace(case.exercise, kit, folder / "honest-ws", editable)
    out = folder / "honest" / "out"
    c = run_child(["grade", case.exercise, str(ws), str(out), *flag, "--no-throughput"], folder, env,
                  max(HONEST_LIMIT_S, case.limit_s), "honest")
    report.honest = _child_json(c)
    r = c.result
    if r is None or not r["passed"] or r["score"] < 1.0:
        report.changed_later.append(f"honest fix graded: {c.describe()}")
        report.problems.append(f"the honest fix graded after it no longer passes: {c.describe()}")


def _drop_large_files(folder: Path, over: int = 32 << 20) -> None:
    """Pytest keeps the last runs' folders: not the gigabytes some attacks leave."""
    for dirpath, _, filenames in os.walk(folder, followlinks=False):
        for name in filenames:
            p = Path(dirpath) / name
            try:
                if not p.is_symlink() and p.is_file() and p.stat().st_blocks * 512 > over:
                    p.unlink()
            except OSError:
                pass
