"""Reading a checkpoint the way a restart would, whatever its layout: one ``torch.save`` file, a
folder of files (model, optimizer, scheduler, trainer state, as the HF Trainer lays it out), or a
``torch.distributed.checkpoint`` (DCP) folder of per-rank files indexed by ``.metadata``.

Everything here reads files a candidate's script wrote, so nothing of them is unpickled in the
grader's process: a ``torch.save`` file, and a DCP folder (its ``.metadata`` and every item), are
loaded as the script's own resume loads them, by the reader process (``grader.evidence.reader``,
``harness.ckpt_reader``: sandboxed, limited, handing back plain data and tensors). Every file is
sent there only when regular, inside the run's working dir and under a size cap.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from grader.evidence import reader
from grader.files import why_not_readable
from harness.ckpt_reader import CAP, METADATA


class LayoutError(Exception):
    """The checkpoint cannot be read as a whole; the message says which file and why."""


def read_dcp(folder: Path, within: Path) -> dict[str, Any]:
    """The whole state dict of a DCP checkpoint, nested as it was saved (``{"model": {...},
    "optimizer": {"state": ..., "param_groups": [...]}, ...}``), every tensor whole, read by the
    reader process (``harness.ckpt_reader.read_dcp``)."""
    why = why_not_readable(folder / METADATA, within=within, cap=CAP)
    if why:
        raise LayoutError(f"its {METADATA} {why}")
    try:
        out = reader.read(folder, "dcp")
    except reader.ReaderError as e:
        raise LayoutError(str(e)) from None
    if not isinstance(out, dict):
        raise LayoutError(f"its {METADATA} is not DCP metadata")
    return out


def load_file(path: Path, within: Path) -> Any:
    """One ``torch.save`` file as the script's resume loads it, in the reader process (or a JSON
    one: an HF Trainer's ``trainer_state.json``)."""
    why = why_not_readable(path, within=within, cap=CAP)
    if why:
        raise LayoutError(f"the file {why}")
    if path.suffix == ".json":
        try:
            return json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError) as e:
            raise LayoutError(f"{path.name} is not JSON: {e}") from None
    try:
        return reader.read(path)
    except reader.ReaderError as e:  # a torn zip, a truncated pickle, a class only the script had
        raise LayoutError(str(e)) from None


def load_checkpoint(path: Path, within: Path, files: list[str] | None = None) -> Any:
    """A checkpoint as a whole: a file's content; a DCP folder's state dict; a folder of files as
    ``{file name without suffix: content}`` (``files``: which of them, relative; all regular files
    in it when None)."""
    if not os.path.lexists(path):
        raise LayoutError("it is not there")
    if path.is_symlink():
        raise LayoutError("it is a symbolic link")
    if path.is_file():
        return load_file(path, within)
    if not path.is_dir():
        raise LayoutError("it is neither a file nor a folder")
    if (path / METADATA).exists():
        return read_dcp(path, within)
    names = files if files is not None else sorted(e.name for e in os.scandir(path)
                                                   if e.is_file(follow_symlinks=False) and not e.name.startswith("."))
    out: dict[str, Any] = {}
    for rel in names[:64]:
        try:
            out[rel.rsplit("/", 1)[-1].split(".", 1)[0]] = load_file(path / rel, within)
        except LayoutError as e:
            raise LayoutError(f"{rel} in it does not load ({e})") from None
    return out
