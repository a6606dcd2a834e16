"""Reading a checkpoint the way a restart would, whatever its layout: one ``torch.save`` file, a
folder of files (model, optimizer, scheduler, trainer state, as the HF Trainer lays it out), or a
``torch.distributed.checkpoint`` (DCP) folder of per-rank files indexed by ``.metadata``.

Everything here reads files a candidate's script wrote, in the grader's process, outside any
sandbox, so nothing runs their code: ``torch.save`` files load with ``weights_only=True``; DCP's
``.metadata`` is a plain pickle, read here with an unpickler that builds only DCP's own metadata
classes and a few torch value types (``torch.load`` of it, or DCP's own reader, would unpickle
anything); each item of a DCP file is a ``torch.save`` stream, loaded with ``weights_only=True``.
Every file is read only when regular, inside the run's working dir and under a size cap.
"""

from __future__ import annotations

import io
import json
import os
import pickle
from pathlib import Path
from typing import Any

from grader.files import why_not_readable

METADATA = ".metadata"
CAP = 512 * 2**20  # per file; the exercises' checkpoints are megabytes
TOTAL_CAP = 1024 * 2**20  # per checkpoint, every file together
ITEMS_CAP = 100_000  # entries of a DCP checkpoint


class LayoutError(Exception):
    """The checkpoint cannot be read as a whole; the message says which file and why."""


_DCP_CLASSES = {
    "torch.distributed.checkpoint.metadata": {"Metadata", "MetadataIndex", "StorageMeta", "TensorProperties",
                                              "TensorStorageMetadata", "BytesStorageMetadata",
                                              "ChunkStorageMetadata", "_MEM_FORMAT_ENCODING"},
    "torch.distributed.checkpoint.filesystem": {"_StorageInfo"},
    "torch.distributed.checkpoint.planner": {"LoadItemType", "WriteItemType"},
    "pathlib": {"PosixPath", "PurePosixPath", "Path"},
    "collections": {"OrderedDict"},
    "builtins": {"set", "frozenset", "tuple", "list", "dict", "slice"},
}


class _MetadataUnpickler(pickle.Unpickler):
    """Builds DCP's metadata classes and torch's value types (Size, dtypes, layouts), nothing else."""

    def find_class(self, module: str, name: str) -> Any:
        import torch

        if name in _DCP_CLASSES.get(module, ()):
            return super().find_class(module, name)
        if module == "torch":
            if name == "Size":
                return torch.Size
            v = getattr(torch, name, None)
            if isinstance(v, (torch.dtype, torch.layout, torch.memory_format)):
                return v
        if module == "torch.serialization" and name == "_get_layout":
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a DCP checkpoint's metadata")


def read_dcp_metadata(folder: Path, within: Path) -> Any:
    path = folder / METADATA
    why = why_not_readable(path, within=within, cap=CAP)
    if why:
        raise LayoutError(f"its {METADATA} {why}")
    try:
        with open(path, "rb") as f:
            md = _MetadataUnpickler(f).load()
    except Exception as e:
        raise LayoutError(f"its {METADATA} does not read: {type(e).__name__}: {str(e)[:160]}") from None
    if not hasattr(md, "state_dict_metadata") or not isinstance(getattr(md, "storage_data", None), dict):
        raise LayoutError(f"its {METADATA} is not DCP metadata")
    return md


def dcp_files(folder: Path, within: Path) -> list[str]:
    """The files a DCP checkpoint's ``.metadata`` says hold its data."""
    md = read_dcp_metadata(folder, within)
    return sorted({str(getattr(s, "relative_path", "")) for s in md.storage_data.values()})


def read_dcp(folder: Path, within: Path) -> dict[str, Any]:
    """The whole state dict of a DCP checkpoint, nested as it was saved (``{"model": {...},
    "optimizer": {"state": ..., "param_groups": [...]}, ...}``), every tensor whole."""
    import torch

    md = read_dcp_metadata(folder, within)
    if len(md.storage_data) > ITEMS_CAP:
        raise LayoutError(f"its {METADATA} lists {len(md.storage_data)} items")
    blobs: dict[str, bytes] = {}
    total = 0
    flat: dict[str, Any] = {}
    for index, info in md.storage_data.items():
        rel = str(getattr(info, "relative_path", ""))
        if not rel or "/" in rel or rel.startswith("."):
            raise LayoutError(f"its {METADATA} names a file {rel!r} outside the checkpoint's folder")
        if rel not in blobs:
            p = folder / rel
            if not os.path.lexists(p):
                raise LayoutError(f"{rel}, which its {METADATA} lists, is missing")
            why = why_not_readable(p, within=within, cap=CAP)
            if why:
                raise LayoutError(f"{rel} {why}")
            blobs[rel] = p.read_bytes()
            total += len(blobs[rel])
            if total > TOTAL_CAP:
                raise LayoutError("its files are over the size the grader reads")
        data = blobs[rel]
        off, length = int(info.offset), int(info.length)
        if off < 0 or length < 0 or off + length > len(data):
            raise LayoutError(f"{rel} is shorter than its {METADATA} says ({len(data)} bytes; an item ends at "
                              f"{off + length})")
        if getattr(info, "transform_descriptors", None):
            raise LayoutError(f"{rel} holds transformed items ({info.transform_descriptors}), which the grader "
                              "does not read")
        try:
            value = torch.load(io.BytesIO(data[off:off + length]), map_location="cpu", weights_only=True)
        except Exception as e:
            raise LayoutError(f"an item of {rel} ({index.fqn}) does not load: {type(e).__name__}: "
                              f"{str(e).splitlines()[0][:160] if str(e) else ''}") from None
        fqn = str(index.fqn)
        meta = md.state_dict_metadata.get(fqn)
        if isinstance(value, torch.Tensor) and hasattr(meta, "chunks"):
            whole = flat.get(fqn)
            if whole is None:
                whole = flat[fqn] = torch.zeros(tuple(meta.size), dtype=value.dtype)
            offsets = tuple(getattr(index, "offset", None) or (0,) * value.dim())
            try:
                view = whole
                for dim, (o, n) in enumerate(zip(offsets, value.shape)):
                    view = view.narrow(dim, int(o), int(n))
                view.copy_(value)
            except (RuntimeError, IndexError) as e:
                raise LayoutError(f"an item of {rel} ({fqn}) does not fit its place: {e}") from None
        else:
            flat[fqn] = value
    mapping = md.planner_data if isinstance(getattr(md, "planner_data", None), dict) else {}
    return _unflatten(flat, mapping)


def _unflatten(flat: dict[str, Any], mapping: dict[str, Any]) -> dict[str, Any]:
    """DCP's flat names back into the nesting they were saved with (``mapping``: name -> path of
    keys, an int key being a list index), as DCP's own loader does."""
    root: dict[str, Any] = {}
    for fqn, value in flat.items():
        path = mapping.get(fqn) or (fqn,)
        node: Any = root
        for i, k in enumerate(path):
            last = i == len(path) - 1
            nxt: Any = value if last else ([] if isinstance(path[i + 1], int) else {})
            if isinstance(node, list):
                while len(node) <= k:
                    node.append(None)
                if last or node[k] is None:
                    node[k] = nxt
                node = node[k]
            else:
                if last or k not in node:
                    node[k] = nxt
                node = node[k]
    return root


def load_file(path: Path, within: Path) -> Any:
    """One ``torch.save`` file (or a JSON one: an HF Trainer's ``trainer_state.json``)."""
    import torch

    why = why_not_readable(path, within=within, cap=CAP)
    if why:
        raise LayoutError(f"the file {why}")
    if path.suffix == ".json":
        try:
            return json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError) as e:
            raise LayoutError(f"{path.name} is not JSON: {e}") from None
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # a torn zip, a truncated pickle, or objects the safe loader refuses
        raise LayoutError(f"{type(e).__name__}: {str(e).strip().splitlines()[0][:160] if str(e).strip() else ''}") \
            from None


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
