"""The checks, one module each (``grader/checks/<name>.py``, see ``base.py`` for what a module
declares). The registry is built from the modules found in this package, so adding a check is
adding its file; the manifest's check names and the grading plan come from here."""

from __future__ import annotations

import importlib
import pkgutil
import signal
import threading
from types import FrameType
from typing import NoReturn

from grader.checks.base import Check, CheckResult, CheckSpec, Context
from grader.text import printable

_NOT_CHECKS = {"base"}


def _discover() -> dict[str, Check]:
    found: dict[str, Check] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name in _NOT_CHECKS or info.name.startswith("_"):
            continue
        check = getattr(importlib.import_module(f"{__name__}.{info.name}"), "CHECK", None)
        if not isinstance(check, Check):
            raise ImportError(f"grader/checks/{info.name}.py defines no CHECK = Check(...); every module in "
                              "grader/checks/ is a check (name helpers with a leading underscore)")
        if check.name != info.name:
            raise ImportError(f"grader/checks/{info.name}.py declares the check {check.name!r}; name the file "
                              "after the check")
        found[check.name] = check
    return dict(sorted(found.items()))


REGISTRY: dict[str, Check] = _discover()
CHECK_NAMES: tuple[str, ...] = tuple(REGISTRY)


JUDGE_TIMEOUT_S = 120.0  # a check reads files on disk; minutes mean something in them is hostile


class _Overtime(Exception):
    pass


def run_check(spec: CheckSpec, ctx: Context, timeout_s: float = JUDGE_TIMEOUT_S) -> CheckResult:
    """Judge one check, within a time limit (in the main thread, where a timer can interrupt it):
    a check that cannot finish is an environment failure, never a hang of the grader. Messages
    lose any control characters a candidate's text brought in."""
    timer = threading.current_thread() is threading.main_thread() and timeout_s > 0

    def overtime(signum: int, frame: FrameType | None) -> NoReturn:
        raise _Overtime

    if timer:
        previous = signal.signal(signal.SIGALRM, overtime)
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        result = REGISTRY[spec.name].judge(spec, ctx)
    except _Overtime:
        result = CheckResult(spec.name, False, f"judging {spec.name} took longer than {timeout_s:.0f} s and was "
                             "stopped", environment=True)
    finally:
        if timer:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
    result.required, result.weight = spec.required, spec.weight
    result.message = printable(result.message)
    return result


__all__ = ["CHECK_NAMES", "REGISTRY", "Check", "CheckResult", "CheckSpec", "Context", "run_check"]
