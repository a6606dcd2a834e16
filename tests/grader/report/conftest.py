"""One headless Chromium per test module that needs it (the browser and print tests)."""

from __future__ import annotations

import pytest

from tests.grader.report.cdp import Browser, chromium


@pytest.fixture(scope="module")
def browser():
    binary = chromium()
    if binary is None:
        pytest.skip("chromium is not installed and `make browser` could not install it (no apt-get, or not root)")
    b = Browser(binary)
    yield b
    b.close()
