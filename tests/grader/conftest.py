"""Shared by tests/grader: commands run in-process (no subprocess where nothing launches).
``invoke`` calls the real ``main()`` with its exit-code handling and returns what it printed."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from grader.cli import main


@dataclass
class Outcome:
    code: int
    out: str
    err: str


@pytest.fixture
def invoke(capsys, monkeypatch):
    def run(*args: str, env: dict[str, str] | None = None, cwd=None) -> Outcome:
        for k, v in (env or {}).items():
            monkeypatch.setenv(k, v)
        if cwd is not None:
            monkeypatch.chdir(cwd)
        code = 0
        try:
            main(list(args))
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        captured = capsys.readouterr()
        return Outcome(code, captured.out, captured.err)

    return run
