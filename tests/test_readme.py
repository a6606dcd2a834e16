"""The README is one screen (issue 29): at most 120 lines, prose within 80 columns (tables and
code aside); figures and lab notes belong in benchmarks/README.md."""

from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_is_one_screen():
    lines = README.read_text().splitlines()
    assert len(lines) <= 120, f"README.md has {len(lines)} lines; move detail to docs/ or benchmarks/README.md"


def test_its_prose_fits_80_columns():
    text = README.read_text()
    fenced = False
    wide = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and not line.startswith("|") and len(line) > 80:
            wide.append(n)
    assert not wide, f"README.md lines over 80 columns: {wide}"
