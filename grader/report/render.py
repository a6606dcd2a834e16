"""Laying a gathered report out with jinja2: HTML (autoescaped, one self-contained file, plots as
inline SVG, no scripts, no external fetches) or Markdown (the same content without the pixels).

Every value a template prints passes ``_finalize``, which strips control characters; HTML
autoescaping then makes candidate text inert, and the Markdown filters escape it for Markdown.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup, escape

TEMPLATES = Path(__file__).resolve().parent / "templates"
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
REVISION_WORDS = {"improved": "improved", "partly": "partly improved", "unchanged": "unchanged",
                  "worse": "got worse", "not-attempted": "not attempted", None: "not recorded"}


def strip_control(text: str) -> str:
    return _CONTROL.sub("", text)


def _finalize(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, Markup):  # our own SVG
        return value
    if isinstance(value, str):
        return strip_control(value)
    return value


def mmss(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(abs(seconds))
    return f"{'-' if seconds < 0 else ''}{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else \
        f"{'-' if seconds < 0 else ''}{s // 60}:{s % 60:02d}"


def level(v: float | None) -> str:
    return "-" if v is None else (f"{v:.0f}" if float(v).is_integer() else f"{v:.2f}")


def pretty(obj: Any) -> str:
    return json.dumps(obj, indent=1, sort_keys=True, default=str)


def diff_class(line: str) -> str:
    if line.startswith(("+++", "---")):
        return "file"
    return {"+": "add", "-": "del", "@": "hunk"}.get(line[:1], "ctx")


def md_text(text: Any) -> str:
    """Inline Markdown text: HTML-special characters escaped, Markdown emphasis and table pipes
    neutralised, one line."""
    s = strip_control(str(text if text is not None else ""))
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = re.sub(r"([\\`*_\[\]|#])", r"\\\1", s)
    return " ".join(s.split())


def md_fence(text: Any, lang: str = "") -> str:
    """A fenced block that no backtick run inside ``text`` can close."""
    s = strip_control(str(text if text is not None else "")).rstrip("\n")
    longest = max((len(m) for m in re.findall(r"`+", s)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{lang}\n{s}\n{fence}"


def svg(text: str | None, label_id: str = "", title: str = "") -> Markup | str:
    """Our own SVG, inline, as an image with a name: ``role="img"`` named by the caption's element
    ``label_id`` (the text alternative a screen reader reads once, as the image), and ``title`` as
    its <title> (the tooltip, and the name where the SVG is taken out of the page)."""
    if not text:
        return ""
    head = text.index(">", text.index("<svg"))
    attrs = ' role="img"' + (f' aria-labelledby="{escape(label_id)}"' if label_id else "")
    inner = f"<title>{escape(strip_control(title))}</title>" if title else ""
    return Markup(text[:head] + attrs + ">" + inner + text[head + 1:])


def _env(autoescape: bool) -> Environment:
    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=autoescape, finalize=_finalize,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters.update(mmss=mmss, level=level, pretty=pretty, diff_class=diff_class, md=md_text, fence=md_fence,
                       svg=svg, revision=lambda o: REVISION_WORDS.get(o, str(o)))
    env.tests["contains"] = lambda seq, x: x in (seq or [])
    return env


def render(report: Any, fmt: str) -> str:
    if fmt == "html":
        return _env(True).get_template("report.html.j2").render(r=report)
    return _env(False).get_template("report.md.j2").render(r=report)


def render_compare(cmp: Any, fmt: str) -> str:
    if fmt == "html":
        return _env(True).get_template("compare.html.j2").render(c=cmp)
    return _env(False).get_template("compare.md.j2").render(c=cmp)
