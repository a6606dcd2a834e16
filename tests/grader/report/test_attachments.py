"""The files a candidate leaves in a design scenario's workspace reach the debrief: listed with
size and sha256, images inline with alt text, within limits, names inert, links not followed."""

from __future__ import annotations

import base64
import hashlib
import os
import zlib
from pathlib import Path

import pytest

from grader.report import attachments as A
from grader.report import data, render
from grader.sessions.lifecycle import new_session
from grader.sessions.store import Store

SLUG = "gpu-allocation"
HOSTILE_NAME = "<img src=x onerror=alert(1)>.png"


def png(width: int = 1) -> bytes:
    """A valid 1-pixel-high greyscale PNG."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return len(body).to_bytes(4, "big") + kind + body + zlib.crc32(kind + body).to_bytes(4, "big")
    ihdr = width.to_bytes(4, "big") + (1).to_bytes(4, "big") + bytes([8, 0, 0, 0, 0])
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" + b"\x80" * width))
            + chunk(b"IEND", b""))


SVG = b'<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><rect/></svg>\n'


@pytest.fixture
def session(tmp_path):
    store = Store.open(tmp_path / "s.db")
    s, _ = new_session(store, "Ada", [SLUG], root=tmp_path / "ws")
    return store, s.id, tmp_path / "ws" / SLUG


def leave(ws: Path) -> dict[str, bytes]:
    files = {"diagram.png": png(4), "plan.svg": SVG, "plan.drawio": b"<mxfile><diagram>x</diagram></mxfile>",
             "costs.csv": b"option,usd\ncloud,32865\n", "model.xlsx": b"PK\x03\x04 not really a workbook",
             "notes/why.md": b"# Why\nborrowing first\n", HOSTILE_NAME: png()}
    for name, body in files.items():
        (ws / name).parent.mkdir(parents=True, exist_ok=True)
        (ws / name).write_bytes(body)
    return files


def test_collect_lists_what_the_candidate_left_and_nothing_handed(session):
    store, sid, ws = session
    files = leave(ws)
    (ws / ".hidden-swap").write_text("x")
    (ws / "data" / "teams.csv").write_text((ws / "data" / "teams.csv").read_text() + "extra,row\n")
    att = A.collect(ws, SLUG, "See ![Borrowing and preemption, week by week](./diagram.png).")
    by = {a.name: a for a in att.files}
    assert set(by) == {*files, "data/teams.csv"}  # not the template, the marker, the hidden file, the data unchanged
    assert by["data/teams.csv"].status == "changed" and by["plan.svg"].status == "new"
    for name, body in files.items():
        assert by[name].size == len(body) and by[name].sha256 == hashlib.sha256(body).hexdigest()
    assert by["diagram.png"].kind == "image" and by["diagram.png"].media_type == "image/png"
    assert by["diagram.png"].alt == "Borrowing and preemption, week by week"  # the candidate's own words
    assert base64.b64decode(by["diagram.png"].data_b64) == files["diagram.png"]
    assert by["plan.svg"].media_type == "image/svg+xml" and "an image the candidate left" in by["plan.svg"].alt
    assert by["plan.drawio"].kind == "file" and by["plan.drawio"].data_b64
    assert by["costs.csv"].kind == "text" and by["costs.csv"].text.startswith("option,usd")
    assert by["model.xlsx"].kind == "file"


def test_an_image_is_known_by_its_bytes_not_its_name(tmp_path):
    (tmp_path / "fake.png").write_text("<script>alert(1)</script>")
    (tmp_path / "fake.svg").write_text("<html><script>alert(1)</script></html>")
    kinds = {a.name: a.kind for a in A.collect(tmp_path, "no-such-exercise").files}
    assert kinds == {"fake.png": "file", "fake.svg": "file"}


def test_a_link_is_listed_and_never_followed(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("the reference fix")
    ws = tmp_path / "ws"
    ws.mkdir()
    os.symlink(secret, ws / "notes.txt")
    os.symlink(tmp_path, ws / "up")
    att = A.collect(ws, "no-such-exercise")
    assert [(a.name, a.kind) for a in att.files] == [("notes.txt", "link"), ("up", "link")]
    assert all(not a.text and not a.data_b64 and not a.sha256 for a in att.files)


def test_limits_each_file_the_total_and_the_count(tmp_path, monkeypatch):
    monkeypatch.setattr(A, "MAX_EMBED_BYTES", 100)
    monkeypatch.setattr(A, "MAX_EMBED_TOTAL", 150)
    monkeypatch.setattr(A, "MAX_FILES", 3)
    for name, size in (("a-big.png", 101), ("b.png", 100), ("c.png", 60), ("d.png", 10)):
        (tmp_path / name).write_bytes(png()[:8] + bytes(size - 8))  # a PNG's signature, then padding
    att = A.collect(tmp_path, "no-such-exercise")
    by = {a.name: a for a in att.files}
    assert not by["a-big.png"].data_b64 and "over 100 B: not embedded" in by["a-big.png"].note
    assert by["b.png"].data_b64 and not by["c.png"].data_b64 and "is spent" in by["c.png"].note
    assert by["a-big.png"].sha256 == hashlib.sha256((tmp_path / "a-big.png").read_bytes()).hexdigest()
    assert att.left_out == 1 and "d.png" not in by


def test_a_workspace_gone_is_said(tmp_path):
    att = A.collect(tmp_path / "gone", SLUG)
    assert not att.files and "no longer at" in att.missing and att


def test_the_debrief_attaches_them_with_names_inert(session):
    store, sid, ws = session
    files = leave(ws)
    store.set_diagnosis(sid, SLUG, "![Borrowing timeline](diagram.png)")
    rep = data.gather(store, sid, with_pixels=False)
    html = render.render(rep, "html")
    assert "Files the candidate left" in html
    assert f'src="data:image/png;base64,{base64.b64encode(files["diagram.png"]).decode()}"' in html
    assert 'alt="Borrowing timeline"' in html
    assert html.count('<img src="data:image/') == 3  # diagram.png, plan.svg, the hostile name's png
    assert 'download="plan.drawio"' in html and hashlib.sha256(files["model.xlsx"]).hexdigest() in html
    assert HOSTILE_NAME not in html and "&lt;img src=x onerror=alert(1)&gt;.png" in html
    assert "borrowing first" in html  # the notes shown
    assert "written design" in html and "written diagnosis" not in html
    md = render.render(rep, "md")
    assert "### Files the candidate left" in md and hashlib.sha256(files["plan.svg"]).hexdigest() in md
    assert HOSTILE_NAME not in md and "| Borrowing timeline |" in md
    assert "base64" not in md  # the HTML embeds; the Markdown lists


def test_a_script_exercise_has_no_attachments_section(tmp_path):
    from tests.grader.sessions.fakes import scored_session

    store, sid = scored_session(tmp_path / "s.db", tmp_path / "ws")
    rep = data.gather(store, sid, with_pixels=False)
    assert rep.exercises[0].attachments is None
    assert "Files the candidate left" not in render.render(rep, "html")
