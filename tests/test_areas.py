"""Every test file belongs to one area (tests/areas.py), and the marker reaches its tests."""

from __future__ import annotations

import pytest

from tests.areas import AREAS, area_of
from tests.conftest import REPO


def test_every_test_file_has_an_area():
    files = sorted(str(p.relative_to(REPO)) for p in (REPO / "tests").rglob("test_*.py"))
    assert len(files) > 100
    assert [f for f in files if area_of(f) is None] == []


@pytest.mark.parametrize("path, area", [
    ("tests/harness/test_sandbox.py", "isolation"),
    ("tests/harness/test_launch.py", "launcher"),
    ("tests/harness/test_collectives.py", "in_rank"),
    ("tests/grader/checks/test_memory_flat.py", "grading"),
    ("tests/grader/sessions/test_store.py", "interviews"),
    ("tests/adversarial/test_hostile.py", "hostile"),
])
def test_the_first_matching_rule_decides(path, area):
    assert area_of(path) == area


def test_the_marker_is_on_the_test(request):
    assert request.node.get_closest_marker("layout") is not None
    assert all(request.node.get_closest_marker(a) is None for a in AREAS if a != "layout")
