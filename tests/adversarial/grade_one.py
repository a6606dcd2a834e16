"""One grading (or one regrade) in a process of its own, for the hostile-submission suite: the suite
watches it from outside (wall time, its own RSS, whether it was killed) and reads what it did from
a summary file, so a grader that hangs, dies or balloons is a finding, never a hung test run.

    python tests/adversarial/grade_one.py grade SLUG WORKSPACE OUT SUMMARY [--sandbox] [--no-throughput]
    python tests/adversarial/grade_one.py regrade RESULT_JSON SUMMARY

``--no-throughput``: no throughput rounds (the honest grading after a case: what an attack can change
is the correctness verdict; timing rounds on a loaded machine would only add noise and minutes).

The summary (JSON): ``outcome`` graded | refused | error, the result as ``GradeResult.to_json()``
when graded, the error's type and line otherwise, and ``sandbox_option``: the name of the
``GradeOptions`` field that turned the sandbox on, or None where grading has none yet.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import traceback
from pathlib import Path

# what the wiring may call GradeOptions' switch: a bool once, the executor since issue 29
SANDBOX_FIELDS = ("executor", "sandbox", "isolated", "isolate")


def sandbox_option() -> str | None:
    from grader.grade import GradeOptions

    names = {f.name for f in dataclasses.fields(GradeOptions)}
    return next((n for n in SANDBOX_FIELDS if n in names), None)


def _grade(slug: str, ws: str, out: str, sandbox: bool, throughput: bool) -> dict:
    from grader.exercises import find_script
    from grader.grade import GradeOptions, grade
    from harness.executor import executor_for

    option = sandbox_option()
    extra = {option: executor_for(sandboxed=sandbox) if option == "executor" else sandbox} if option else {}
    res = grade(find_script(slug), GradeOptions(kind="workspace", workspace=Path(ws), out_dir=Path(out),
                                                skip_measurements=not throughput, **extra))
    return {"outcome": "graded", "result": res.to_json(), "sandbox_option": option}


def _regrade(result_json: str) -> dict:
    from grader.exercises import find_script
    from grader.grade import regrade
    from grader.result import GradeResult

    old = GradeResult.read(Path(result_json))
    res = regrade(old, find_script(old.exercise))
    return {"outcome": "graded", "result": res.to_json(), "sandbox_option": None}


def main(argv: list[str]) -> int:
    from harness.errors import TrainwreckError

    flags = {a for a in argv if a.startswith("--")}
    argv = [a for a in argv if not a.startswith("--")]
    if argv[0] == "grade":
        slug, ws, out, summary = argv[1:5]
        work = lambda: _grade(slug, ws, out, "--sandbox" in flags, "--no-throughput" not in flags)  # noqa: E731
    else:
        result_json, summary = argv[1:3]
        work = lambda: _regrade(result_json)  # noqa: E731
    try:
        data = work()
    except TrainwreckError as e:  # a refusal: the one line the CLI would print, exit 2
        data = {"outcome": "refused", "error_type": type(e).__name__, "error": str(e)}
    except BaseException as e:  # noqa: BLE001 - anything else is a finding: keep its traceback
        data = {"outcome": "error", "error_type": type(e).__name__, "error": str(e),
                "traceback": traceback.format_exc()[-4000:]}
    tmp = Path(summary + ".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
