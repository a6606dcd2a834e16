"""What the candidate left in a design scenario's workspace (a diagram, a spreadsheet, notes), for
the debrief: every file that was not handed to them, or was and changed, with its size and sha256.
Images are embedded inline (base64, with alt text), short text files shown, others embedded as a
download in the HTML debrief, all within limits; anything over them is listed with why.

Everything here is the candidate's: names are shown as text (the templates escape them), a link
is listed and never followed, and only regular files are read. The workspace is read when the
debrief is made: a workspace moved or removed since is said so in the debrief.
"""

from __future__ import annotations

import base64
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from harness.rundir import sha256_file

MAX_FILES = 50  # listed; the rest are counted
MAX_WALK = 5000  # entries looked at before giving up on a tree (a copied dataset, node_modules)
MAX_EMBED_BYTES = 2 * 1024 * 1024  # one file embedded in the HTML debrief
MAX_EMBED_TOTAL = 10 * 1024 * 1024  # all of an exercise's embedded files together
MAX_TEXT_BYTES = 64 * 1024  # a text file shown in the debrief
MAX_HASH_BYTES = 256 * 1024 * 1024  # a larger file is listed with its size alone
TEXT_SUFFIXES = {".md", ".txt", ".csv", ".tsv", ".json", ".yaml", ".yml", ".toml", ".py", ".sh"}
# What the kit itself writes into a workspace; not the candidate's work.
KIT_FILES = {".trainwreck-session.json", "DIAGNOSIS.md"}
_IMAGE_MAGIC = ((b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff", "image/jpeg"), (b"GIF87a", "image/gif"),
                (b"GIF89a", "image/gif"))
_MARKDOWN_IMAGE = re.compile(r"!\[([^\]\n]{1,200})\]\(\s*<?([^)>\s]+)>?[^)]*\)")


@dataclass(frozen=True)
class Attachment:
    name: str  # the path inside the workspace, as the candidate named it
    size: int
    sha256: str  # "" when not hashed (see note)
    status: str  # "new" or "changed" (a handed file the candidate edited)
    kind: str  # "image", "text", "file" or "link"
    media_type: str = "application/octet-stream"
    alt: str = ""
    data_b64: str = ""  # the bytes, embedded; "" when over the limits
    text: str = ""  # a short text file's content
    note: str = ""  # why it is not embedded or shown

    @property
    def data_uri(self) -> str:
        return f"data:{self.media_type};base64,{self.data_b64}" if self.data_b64 else ""

    @property
    def download_name(self) -> str:
        return PurePosixPath(self.name).name


@dataclass
class Attachments:
    workspace: str
    files: list[Attachment] = field(default_factory=list)
    left_out: int = 0  # files past MAX_FILES (or the walk's limit), counted, not listed
    missing: str = ""  # why the workspace could not be read

    def __bool__(self) -> bool:
        return bool(self.files or self.missing or self.left_out)


def human_size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    return f"{n / 1024:.1f} KiB" if n < 1024 ** 2 else f"{n / 1024 ** 2:.1f} MiB"


def image_type(head: bytes, name: str) -> str | None:
    """The image's media type from its first bytes (never from the name alone), or None."""
    for magic, media in _IMAGE_MAGIC:
        if head.startswith(magic):
            return media
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    # an SVG shown through <img> runs no script and fetches nothing
    if name.lower().endswith(".svg") and b"<svg" in head[:4096].lower():
        return "image/svg+xml"
    return None


def alt_texts(answer: str | None) -> dict[str, str]:
    """``![alt](path)`` in the candidate's written answer: their own words for each image."""
    out: dict[str, str] = {}
    for alt, target in _MARKDOWN_IMAGE.findall(answer or ""):
        out.setdefault(str(PurePosixPath(target.removeprefix("./"))), " ".join(alt.split()))
    return out


def _walk(root: Path) -> tuple[list[tuple[str, os.stat_result]], int]:
    """(relative posix name, lstat) of every entry not hidden, links not followed; and how many
    more there were past the walk's limit."""
    found, seen, over = [], 0, 0
    for top, dirs, files in os.walk(root, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
        for name in sorted(files) + [d for d in dirs if os.path.islink(os.path.join(top, d))]:
            if name.startswith("."):
                continue
            seen += 1
            if seen > MAX_WALK:
                over += 1
                continue
            p = Path(top) / name
            found.append((p.relative_to(root).as_posix(), os.lstat(p)))
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(top, d))]
    return found, over


def _handed(slug: str) -> dict[str, str]:
    """sha256 of each file the workspace was filled with, by name ({} when the kit no longer has
    the exercise: every file is then listed)."""
    from grader.exercises import find
    from grader.sessions.workspace import candidate_files

    try:
        ex = find(slug)
    except Exception:  # a debrief must not fail on an exercise removed from the kit since
        return {}
    return {rel.as_posix(): sha256_file(ex.dir / rel) for rel in candidate_files(ex.dir, ex.manifest)}


def collect(workspace: str | Path, slug: str, answer: str | None = None) -> Attachments:
    """The files the candidate left in ``workspace``: new ones, and handed ones they changed."""
    root = Path(workspace)
    out = Attachments(str(root))
    if not root.is_dir():
        out.missing = f"the workspace is no longer at {root}: its files cannot be attached"
        return out
    handed, alts = _handed(slug), alt_texts(answer)
    entries, out.left_out = _walk(root)
    budget = MAX_EMBED_TOTAL
    for name, st in entries:
        if name in KIT_FILES:
            continue
        if len(out.files) >= MAX_FILES:
            out.left_out += 1
            continue
        if stat.S_ISLNK(st.st_mode):
            out.files.append(Attachment(name, 0, "", "new", "link", note="a link: not followed"))
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        try:
            a = _attachment(root / name, name, st.st_size, handed, alts, budget)
        except OSError as e:  # unreadable (permissions, removed meanwhile): listed, the debrief goes on
            a = Attachment(name, st.st_size, "", "new", "file", note=f"could not be read ({e.strerror})")
        if a is None:
            continue
        budget -= len(a.data_b64) * 3 // 4
        out.files.append(a)
    return out


def _attachment(path: Path, name: str, size: int, handed: dict[str, str], alts: dict[str, str],
                budget: int) -> Attachment | None:
    if size > MAX_HASH_BYTES:
        return Attachment(name, size, "", "changed" if name in handed else "new", "file",
                          note=f"over {human_size(MAX_HASH_BYTES)}: listed only")
    digest = sha256_file(path)
    if handed.get(name) == digest:
        return None  # handed and unchanged
    status = "changed" if name in handed else "new"
    fields: dict[str, Any] = {"name": name, "size": size, "sha256": digest, "status": status}
    with open(path, "rb") as f:
        head = f.read(4096)
    media = image_type(head, name)
    fits = size <= min(MAX_EMBED_BYTES, budget)
    why = (f"over {human_size(MAX_EMBED_BYTES)}: not embedded" if size > MAX_EMBED_BYTES else
           f"the debrief's {human_size(MAX_EMBED_TOTAL)} for attachments is spent: not embedded")
    if media:
        alt = alts.get(name) or f"{name}, an image the candidate left ({human_size(size)})"
        return Attachment(**fields, kind="image", media_type=media, alt=alt,
                          data_b64=base64.b64encode(path.read_bytes()).decode() if fits else "",
                          note="" if fits else why)
    if PurePosixPath(name).suffix.lower() in TEXT_SUFFIXES and size <= MAX_TEXT_BYTES:
        try:
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is not None:
            return Attachment(**fields, kind="text", media_type="text/plain", text=text)
    return Attachment(**fields, kind="file", data_b64=base64.b64encode(path.read_bytes()).decode() if fits else "",
                      note="" if fits else why)
