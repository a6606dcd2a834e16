"""Reading a candidate's checkpoint as the candidate's own resume would, in a process of its own.

A checkpoint is a pickle the candidate's code wrote: loading it runs whatever it names. The grader
never unpickles one in its own process. It starts this module (``python -m harness.ckpt_reader``)
as a separate process, inside the bubblewrap sandbox where it can run (``grader.evidence.reader``),
with the run's folders read-only, nothing writable, no network, and limits on its address space
and CPU time set here before anything is read. This process loads what it is asked for the way a
resume does (``torch.load(weights_only=False)``: a checkpoint that also keeps Python's RNG state,
a config object or a whole ``nn.Module`` loads, as it does for the script), and hands back plain
data: a JSON structure on one line, then the tensors as one safetensors blob (a format with no
code in it). The grader parses both with caps; whatever the pickle did here stays here.

Protocol, one request per line on stdin: ``{"path": "...", "kind": "file" | "dcp"}``. Answer on
stdout: ``{"ok": true, "tree": ..., "bytes": N}\\n`` then N bytes, or ``{"ok": false, "error": "..."}``.

The tree: a tensor is ``{"t": i}`` (its name in the blob), a dict ``{"d": [[key, value], ...]}``
(keys keep their type: an optimizer's state is keyed by int), a list ``{"l": [...]}``, a tuple
``{"u": [...]}``, a float that JSON cannot hold ``{"f": "nan"}``, bytes ``{"x": length}``; str, int,
finite float, bool and None as themselves. An object is ``{"o": "module.Class", "v": ...}`` with
what it holds: a module, an optimizer, a scheduler or a scaler its ``state_dict()``, a numpy array
a tensor, any other object its ``__dict__`` (or nothing).
"""

from __future__ import annotations

import io
import json
import math
import os
import resource
import sys
from pathlib import Path
from typing import Any

AS_LIMIT = 4 << 30  # address space: torch's CPU import needs under 2 GiB; a checkpoint is capped at 1
CPU_LIMIT_S = 600  # CPU seconds for the process's whole life (the grader also times each request)
CAP = 512 * 2**20  # per file; the exercises' checkpoints are megabytes
TOTAL_CAP = 1024 * 2**20  # tensor bytes handed back per request
NODES_CAP = 200_000  # values in one answer's tree
DEPTH_CAP = 16
STR_CAP = 4096  # characters of one string kept
ITEMS_CAP = 100_000  # entries of a DCP checkpoint
METADATA = ".metadata"


class ReadError(Exception):
    """The checkpoint cannot be read as a whole; the message says which file and why."""


class _Encoder:
    def __init__(self) -> None:
        self.tensors: dict[str, Any] = {}
        self.nbytes = 0
        self.nodes = 0

    def tensor(self, t: Any) -> dict[str, Any]:
        import torch

        try:
            if hasattr(t, "to_local"):  # a DTensor: this process holds no group to gather it with
                t = t.to_local()
            if t.is_sparse:
                t = t.to_dense()
            t = t.detach().to("cpu").contiguous().clone()  # one storage each: safetensors shares none
        except Exception as e:
            return {"o": f"torch.Tensor ({type(e).__name__})"}
        if t.dtype not in _SAFETENSORS_DTYPES(torch):
            return {"o": f"torch.Tensor ({t.dtype})"}
        self.nbytes += t.numel() * t.element_size()
        if self.nbytes > TOTAL_CAP:
            raise ReadError(f"it holds over {TOTAL_CAP >> 20} MiB of tensors")
        name = str(len(self.tensors))
        self.tensors[name] = t
        return {"t": name}

    def __call__(self, x: Any, depth: int = 0) -> Any:
        import torch

        self.nodes += 1
        if self.nodes > NODES_CAP:
            raise ReadError(f"it holds over {NODES_CAP} values")
        if depth > DEPTH_CAP:
            return {"o": "(nested too deep)"}
        if x is None or isinstance(x, (bool, int)):
            return x
        if isinstance(x, float):
            return x if math.isfinite(x) else {"f": repr(x)}
        if isinstance(x, str):
            return x[:STR_CAP]
        if isinstance(x, torch.Tensor):
            return self.tensor(x)
        if isinstance(x, (bytes, bytearray)):
            return {"x": len(x)}
        if isinstance(x, dict):
            return {"d": [[self.key(k), self(v, depth + 1)] for k, v in x.items()]}
        if isinstance(x, list):
            return {"l": [self(v, depth + 1) for v in x]}
        if isinstance(x, tuple):
            return {"u": [self(v, depth + 1) for v in x]}
        if isinstance(x, (set, frozenset)):
            return {"l": [self(v, depth + 1) for v in sorted(x, key=repr)]}
        return self.obj(x, depth)

    def key(self, k: Any) -> Any:
        if k is None or isinstance(k, (bool, int, str)):
            return k
        if isinstance(k, float) and math.isfinite(k):
            return k
        return repr(k)[:STR_CAP]

    def obj(self, x: Any, depth: int) -> dict[str, Any]:
        import torch

        cls = f"{type(x).__module__}.{type(x).__qualname__}"[:200]
        if type(x).__module__ == "numpy" or hasattr(x, "__array_interface__"):
            try:
                import numpy as np

                if isinstance(x, np.generic):
                    return self(x.item(), depth + 1)
                return self.tensor(torch.from_numpy(np.ascontiguousarray(x)))
            except Exception:
                return {"o": cls}
        state = None
        if isinstance(x, (torch.nn.Module, torch.optim.Optimizer)) or callable(getattr(x, "state_dict", None)):
            try:
                state = x.state_dict()
            except Exception:
                state = None
        elif isinstance(getattr(x, "__dict__", None), dict):
            state = dict(vars(x))
        return {"o": cls, "v": self(state, depth + 1)} if state is not None else {"o": cls}


def _SAFETENSORS_DTYPES(torch) -> set:  # noqa: N802 - a constant, built once torch is imported
    return {torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32,
            torch.int16, torch.int8, torch.uint8, torch.bool}


def _readable(path: Path, cap: int = CAP) -> None:
    st = os.lstat(path)
    import stat as st_mod

    if not st_mod.S_ISREG(st.st_mode):
        raise ReadError("it is not a regular file")
    if st.st_size > cap:
        raise ReadError(f"it is {st.st_size >> 20} MiB, over the {cap >> 20} MiB the grader reads")


def read_file(path: Path) -> Any:
    """One ``torch.save`` file as a resume loads it (or a JSON one: an HF Trainer's state)."""
    import torch

    _readable(path)
    if path.suffix == ".json":
        try:
            return json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError) as e:
            raise ReadError(f"{path.name} is not JSON: {e}") from None
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # a torn zip, a truncated pickle, a class the script defined and we lack
        msg = str(e).strip().splitlines()[0][:160] if str(e).strip() else ""
        raise ReadError(f"{type(e).__name__}: {msg}") from None


def read_dcp(folder: Path) -> dict[str, Any]:
    """The whole state dict of a ``torch.distributed.checkpoint`` folder, nested as it was saved,
    every tensor whole; every file its ``.metadata`` lists must be there and long enough."""
    import pickle

    import torch

    meta_path = folder / METADATA
    try:
        _readable(meta_path)
    except ReadError as e:
        raise ReadError(f"its {METADATA} {e}") from None
    try:
        with open(meta_path, "rb") as f:
            md = pickle.load(f)
    except Exception as e:
        raise ReadError(f"its {METADATA} does not read: {type(e).__name__}: {str(e)[:160]}") from None
    if not hasattr(md, "state_dict_metadata") or not isinstance(getattr(md, "storage_data", None), dict):
        raise ReadError(f"its {METADATA} is not DCP metadata")
    if len(md.storage_data) > ITEMS_CAP:
        raise ReadError(f"its {METADATA} lists {len(md.storage_data)} items")
    blobs: dict[str, bytes] = {}
    total = 0
    flat: dict[str, Any] = {}
    for index, info in md.storage_data.items():
        rel = str(getattr(info, "relative_path", ""))
        if not rel or "/" in rel or rel.startswith("."):
            raise ReadError(f"its {METADATA} names a file {rel!r} outside the checkpoint's folder")
        if rel not in blobs:
            p = folder / rel
            if not os.path.lexists(p):
                raise ReadError(f"{rel}, which its {METADATA} lists, is missing")
            try:
                _readable(p)
            except ReadError as e:
                raise ReadError(f"{rel} {e}") from None
            blobs[rel] = p.read_bytes()
            total += len(blobs[rel])
            if total > TOTAL_CAP:
                raise ReadError("its files are over the size the grader reads")
        data = blobs[rel]
        off, length = int(info.offset), int(info.length)
        if off < 0 or length < 0 or off + length > len(data):
            raise ReadError(f"{rel} is shorter than its {METADATA} says ({len(data)} bytes; an item ends at "
                            f"{off + length})")
        if getattr(info, "transform_descriptors", None):
            raise ReadError(f"{rel} holds transformed items ({info.transform_descriptors}), which the grader "
                            "does not read")
        try:
            value = torch.load(io.BytesIO(data[off:off + length]), map_location="cpu", weights_only=False)
        except Exception as e:
            raise ReadError(f"an item of {rel} ({index.fqn}) does not load: {type(e).__name__}: "
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
                raise ReadError(f"an item of {rel} ({fqn}) does not fit its place: {e}") from None
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


def answer(request: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
    """One request's header and blob (never raises for a bad checkpoint: the header says why)."""
    from safetensors.torch import save

    path = Path(str(request.get("path", "")))
    try:
        obj = read_dcp(path) if request.get("kind") == "dcp" else read_file(path)
        enc = _Encoder()
        tree = enc(obj)
        blob = save(enc.tensors) if enc.tensors else b""
    except ReadError as e:
        return {"ok": False, "error": str(e)}, b""
    except RecursionError:
        return {"ok": False, "error": "it is nested too deeply to read"}, b""
    except MemoryError:
        return {"ok": False, "error": f"reading it needs over {AS_LIMIT >> 30} GiB"}, b""
    except FileNotFoundError:
        return {"ok": False, "error": "it is not there"}, b""
    except OSError as e:
        return {"ok": False, "error": f"it cannot be read ({e.strerror or type(e).__name__})"}, b""
    except Exception as e:  # whatever the objects it holds did when they were described
        return {"ok": False, "error": f"it could not be described ({type(e).__name__}: {str(e)[:160]})"}, b""
    return {"ok": True, "tree": tree, "bytes": len(blob)}, blob


def main() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_LIMIT_S, CPU_LIMIT_S))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # The answers go out on the real stdout only; anything a pickle prints goes to stderr.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    import torch  # noqa: F401 - imported once, before the first request, so each answer is quick

    for line in sys.stdin:
        try:
            request = json.loads(line)
        except ValueError:
            continue
        header, blob = answer(request)
        out.write(json.dumps(header, allow_nan=False).encode() + b"\n")
        out.write(blob)
        out.flush()


if __name__ == "__main__":
    main()
