"""Deterministic workloads for the tests' fixtures, and the artifact store periodic-stall's script
uses (``ArtifactStore``). The exercise scripts define their own data and models (docs/design.md,
"Where the exercises' data and models come from"); these are the kit's copies, with a ledger.

Datasets are generated from a seed, so every run sees the same numbers. Under the harness, each
``__getitem__``, and each batch fetch (``__getitems__``), appends ``(attempt, dataset, index or
indices, step)`` to the rank's signed sample ledger; the grader reads which samples each rank
really consumed from there, never from the script. Outside the harness the ledger is a no-op and
these are plain torch datasets and modules.

Whichever process of the rank reads: the rank itself, a DataLoader worker it forked (the
recorder is inherited; its record's step is the one it was forked at), or, under a sandboxed
launch, a worker started with ``spawn`` or ``forkserver`` (no recorder there: the record goes
over the rank's channel with the attempt from the launcher's environment and no step, which the
parent's receive time stands in for).
"""

from __future__ import annotations

import array
import contextlib
import math
import os
import shutil
import sys
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from harness import channel, instrument, rundir, saves, store_client

_spawned: list = []  # the ledger writer of a process the harness did not start (spawn, forkserver)


def _record(dataset: str, index: int | list[int]) -> None:
    rec = instrument.current()
    if rec is not None:
        rec.sample(dataset, index)
    elif channel.active():
        _record_spawned(dataset, index)


def _record_spawned(dataset: str, index: int | list[int]) -> None:
    """A read in a process of the rank the bootstrap never ran in (a DataLoader worker started with
    ``spawn`` or ``forkserver``): sent over the channel, which the parent attributes to the rank
    from outside (the process descends from it) and signs. Unsandboxed there is no key here to sign
    with, so such reads are not recorded (docs/run-dir.md)."""
    if not _spawned or _spawned[0][0] != os.getpid():
        _spawned[:] = [(os.getpid(), channel.open_writer(rundir.SAMPLES, ""))]
    i = int(index) if not isinstance(index, list) else [int(x) for x in index]
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
    _spawned[0][1].write({"a": attempt, "ds": dataset, "i": i})


class _Ledgered(Dataset):
    """A DataLoader batch is one fetch (``__getitems__``, which torch's map-style fetcher calls when
    a dataset has it, ``Subset`` passing it on): one ledger record for the batch, not one per item."""

    name: str

    def _item(self, index: int):
        raise NotImplementedError

    def __getitem__(self, index: int):
        _record(self.name, index)
        return self._item(index)

    def __getitems__(self, indices: list[int]) -> list:
        if type(self).__getitem__ is not _Ledgered.__getitem__:  # a subclass's own item, per item
            return [self[i] for i in indices]
        indices = [int(i) for i in indices]
        _record(self.name, indices)
        return [self._item(i) for i in indices]


class SyntheticRegression(_Ledgered):
    """``y = x @ w + noise`` with ``x`` standard normal: a fixed, learnable target."""

    def __init__(self, size: int, features: int = 32, targets: int = 1, seed: int = 0,
                 noise: float = 0.01, name: str = "train"):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(size, features, generator=g)
        w = torch.randn(features, targets, generator=g) / math.sqrt(features)
        self.y = self.x @ w + noise * torch.randn(size, targets, generator=g)
        self.name = name

    def __len__(self) -> int:
        return len(self.x)

    def _item(self, index: int):
        return self.x[index], self.y[index]


class SyntheticTokens(_Ledgered):
    """Token sequences from a fixed random bigram chain: next-token prediction has real signal."""

    def __init__(self, size: int, seq_len: int = 32, vocab: int = 64, seed: int = 0,
                 name: str = "train"):
        g = torch.Generator().manual_seed(seed)
        logits = torch.randn(vocab, vocab, generator=g) * 3
        probs = torch.softmax(logits, dim=-1)
        seqs = torch.empty(size, seq_len + 1, dtype=torch.long)
        seqs[:, 0] = torch.randint(vocab, (size,), generator=g)
        for t in range(seq_len):
            seqs[:, t + 1] = torch.multinomial(probs[seqs[:, t]], 1, generator=g).squeeze(1)
        self.seqs = seqs
        self.name = name

    def __len__(self) -> int:
        return len(self.seqs)

    def _item(self, index: int):
        s = self.seqs[index]
        return s[:-1], s[1:]


class SensorRecords(_Ledgered):
    """Raw sensor traces as stored: each item is ``(record, target)``, the record ``length``
    little-endian int16 samples as ``bytes`` (a mix of a few tones plus noise, as a sensor would
    store it), the target a fixed function of which tones are present and how loud. Turning the
    bytes into model inputs is the reader's job, as with any stored format."""

    def __init__(self, size: int, length: int = 64, tones: int = 3, seed: int = 0, name: str = "train"):
        g = torch.Generator().manual_seed(seed)
        t = torch.arange(length, dtype=torch.float64)
        freq = torch.randint(1, length // 4 + 1, (size, tones), generator=g)
        amp = torch.rand(size, tones, generator=g, dtype=torch.float64) + 0.2
        phase = torch.rand(size, tones, 1, generator=g, dtype=torch.float64) * 2 * math.pi
        wave = (amp[:, :, None] * torch.sin(2 * math.pi * freq[:, :, None] * t / length + phase)).sum(1)
        wave = wave + 0.1 * torch.randn(size, length, generator=g, dtype=torch.float64)
        scale = 8000.0 / wave.abs().amax(1, keepdim=True)
        weight = torch.randn(length // 4 + 1, generator=g, dtype=torch.float64)
        samples = array.array("h", (wave * scale).round().to(torch.int16).flatten().tolist())
        if sys.byteorder == "big":
            samples.byteswap()
        self._blob = samples.tobytes()
        self._y = (amp * weight[freq]).sum(1, keepdim=True).to(torch.float32)
        self._stride = 2 * length
        self.name = name

    def __len__(self) -> int:
        return len(self._y)

    def _item(self, index: int):
        return self._blob[index * self._stride:(index + 1) * self._stride], self._y[index]


@contextlib.contextmanager
def own_rng(seed: int):
    """Initialise parameters from the kit's own seeded generator, leaving the global RNG as it was:
    a script that draws from the global RNG in another order (a DataLoader iterator created before
    the model, say) still gets the same initial weights."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


class MLP(nn.Module):
    """Linear layers with GELU between them. Initialised from ``seed`` alone (see ``own_rng``)."""

    def __init__(self, features: int = 32, hidden: int = 128, targets: int = 1, depth: int = 3, seed: int = 0):
        super().__init__()
        with own_rng(seed):
            self._build(features, hidden, targets, depth)

    def _build(self, features: int, hidden: int, targets: int, depth: int) -> None:
        layers: list[nn.Module] = []
        width = features
        for _ in range(depth - 1):
            layers += [nn.Linear(width, hidden), nn.GELU()]
            width = hidden
        layers.append(nn.Linear(width, targets))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class Block(nn.Module):
    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = nn.MultiheadAttention(d_model, n_head, batch_first=True)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyTransformer(nn.Module):
    """A causal decoder small enough that a step is milliseconds on one CPU core. Initialised from
    ``seed`` alone (see ``own_rng``)."""

    mask: torch.Tensor  # a buffer (register_buffer), which the checker cannot tell from a submodule

    def __init__(self, vocab: int = 64, seq_len: int = 32, d_model: int = 64, n_layer: int = 2,
                 n_head: int = 4, seed: int = 0):
        super().__init__()
        with own_rng(seed):
            self._build(vocab, seq_len, d_model, n_layer, n_head)

    def _build(self, vocab: int, seq_len: int, d_model: int, n_layer: int, n_head: int) -> None:
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.register_buffer("mask", torch.triu(torch.full((seq_len, seq_len), float("-inf")), 1),
                             persistent=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x, self.mask[:t, :t])
        return self.head(self.ln_f(x))


class ResidualMLP(nn.Module):
    """A deep residual MLP: many small layers, so a step has many gradients to communicate.
    Initialised from ``seed`` alone (see ``own_rng``)."""

    def __init__(self, features: int, width: int, depth: int, seed: int = 0):
        super().__init__()
        with own_rng(seed):
            self.inp = nn.Linear(features, width)
            self.blocks = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
            self.out = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for block in self.blocks:
            h = h + F.gelu(block(h)) / len(self.blocks)
        return self.out(h)


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@dataclass(frozen=True)
class Workload:
    """The fixed size of a piece of training work; the grader checks runs against it."""

    dataset_size: int
    global_batch: int
    epochs: int
    seed: int = 0

    @property
    def steps_per_epoch(self) -> int:
        return self.dataset_size // self.global_batch

    @property
    def steps(self) -> int:
        return self.steps_per_epoch * self.epochs


class ArtifactStore:
    """The kit's artifact store (an object store behind a network link), as exercise scripts use it.

    Under a launch that runs the store service (``harness.store_service``: the grader's runs of an
    exercise whose manifest has ``[run.store]``), every call is a request to that service, a
    separate process outside the rank: an upload sends the file's bytes and returns once the
    service has read them at its link's rate and published the object whole, as an object-store
    PUT does. The rate is the service's; ``mb_per_s`` here no longer changes it. ``root`` must be
    the service's folder (the same path the script always used).

    Outside such a launch (bare ``torchrun``, ``trainwreck run`` of a script without a store), it
    stands in by itself: a local folder reached at ``mb_per_s`` MiB/s. An upload copies the file in
    under a temporary name, takes as long as ``mb_per_s`` needs for its bytes (waiting on the link,
    not computing), and then appears under its name whole.

    Under the harness each upload is traced (``op = "upload"`` in ``saves.jsonl``, with the
    service's receipt id), so the grader can tell which checkpoint each object holds; whether it
    counts is decided from the service's own log."""

    def __init__(self, root: str, mb_per_s: float = 16.0):
        self.root = root
        self.mb_per_s = mb_per_s

    def _service(self) -> store_client.StoreClient | None:
        if not store_client.active():
            return None
        theirs = store_client.service_root()
        if theirs is not None and os.path.realpath(self.root) != theirs:
            raise ValueError(f"ArtifactStore({self.root!r}): the artifact store of this launch keeps its objects "
                             f"in {theirs}; give that folder as the store's root")
        return store_client.StoreClient()

    def upload(self, path: str, name: str) -> str:
        dst = os.path.abspath(os.path.join(self.root, name))
        svc = self._service()
        if svc is None:
            saves.traced("upload", os.path.abspath(path), dst, lambda: self._local_upload(path, name))
        else:
            saves.traced("upload", os.path.abspath(path), dst, lambda: svc.put(path, name),
                         end=lambda receipt: {"id": receipt["id"], "bytes": receipt["bytes"],
                                              "sha256": receipt["sha256"]})
        return os.path.join(self.root, name)

    def _local_upload(self, path: str, name: str) -> None:
        os.makedirs(self.root, exist_ok=True)
        dst = os.path.join(self.root, name)
        partial = os.path.join(self.root, f".{name}.partial")
        t0 = time.perf_counter()
        shutil.copyfile(path, partial)
        transfer = os.path.getsize(partial) / (self.mb_per_s * 2**20)
        time.sleep(max(0.0, transfer - (time.perf_counter() - t0)))
        os.replace(partial, dst)

    def list(self) -> list[str]:
        svc = self._service()
        if svc is not None:
            return sorted(svc.list())
        if not os.path.isdir(self.root):
            return []
        return sorted(n for n in os.listdir(self.root) if not n.startswith("."))

    def delete(self, name: str) -> None:
        svc = self._service()
        if svc is not None:
            svc.delete(name)
        else:  # as an object store answers: deleting a key that is not there is no error
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(self.root, name))
