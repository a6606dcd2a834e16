"""The checks, one module each (``grader/checks/<name>.py``, see ``base.py`` for what a module
declares). The registry is built from the modules found in this package, so adding a check is
adding its file; the manifest's check names and the grading plan come from here."""

from __future__ import annotations

import importlib
import pkgutil

from grader.checks.base import Check, CheckResult, CheckSpec, Context

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


def run_check(spec: CheckSpec, ctx: Context) -> CheckResult:
    result = REGISTRY[spec.name].judge(spec, ctx)
    result.required, result.weight = spec.required, spec.weight
    return result


__all__ = ["CHECK_NAMES", "REGISTRY", "Check", "CheckResult", "CheckSpec", "Context", "run_check"]
