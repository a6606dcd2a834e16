"""Text that came from a candidate's run (error lines, paths, file names) is shown to people in
terminals and reports: control characters go (an ANSI escape in a traceback could rewrite the
interviewer's screen), newlines and tabs stay."""

from __future__ import annotations

import re

_ANSI = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[@-Z\\-_])")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(s: str) -> str:
    return _CONTROL.sub("", _ANSI.sub("", s))
