"""The lookups a rewrite's change() uses for what its applies() found: present, it is handed back
typed; missing or of another kind, one MissingNode naming it (not an AttributeError on None)."""

from __future__ import annotations

import ast

import pytest

from grader.validity.rewrites.base import MissingNode, found, found_as, found_call
from grader.validity.source import snippet


def test_found_hands_back_what_is_there_and_names_what_is_not():
    main = snippet("def main():\n    pass")[0]
    assert found(main, "main") is main
    assert found(0, "an index") == 0  # a falsy value is still found: only None is missing
    with pytest.raises(MissingNode, match="main is missing"):
        found(None, "main")


def test_found_as_checks_the_kind():
    loop = snippet("for x in xs:\n    pass")[0]
    assert found_as(loop, ast.For, "the batch loop") is loop
    with pytest.raises(MissingNode, match="the batch loop is a For, not the While"):
        found_as(loop, ast.While, "the batch loop")


def test_found_call_reads_an_expression_statements_call():
    call = found_call(snippet("torch.save(obj, path)")[0], "torch.save()")
    assert ast.unparse(call.func) == "torch.save"
    with pytest.raises(MissingNode, match="torch.save"):
        found_call(snippet("x = 1")[0], "torch.save()")
