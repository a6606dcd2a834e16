"""Rewrites of how the data reaches the step: DataLoader workers for training, persistent workers
for evaluation, a hand-written sampler with DistributedSampler's guarantees, and each batch as
micro-batches accumulated into one optimizer step."""

from __future__ import annotations

import ast

from grader.validity.rewrites.base import Rewrite, found, found_as, found_call
from grader.validity.source import (
    add_import,
    dataloaders,
    ddp_assign,
    fresh,
    is_call,
    kwarg,
    leaves_loop,
    loaded,
    snippet,
    stored,
    train_loader,
    train_loop,
)


class LoaderWorkers(Rewrite):
    name = "loader-workers"
    why = "two DataLoader worker processes fetch and collate the training batches; the sampler, in the rank, decides their order"

    def applies(self, tree: ast.Module) -> bool:
        c = train_loader(tree)
        return c is not None and kwarg(c, "num_workers") is None

    def change(self, tree: ast.Module) -> None:
        found(train_loader(tree), "the training DataLoader").keywords.append(ast.keyword("num_workers", ast.Constant(2)))


class EvalWorkers(Rewrite):
    name = "eval-persistent-workers"
    why = "evaluation batches come from a persistent DataLoader worker: the same samples in the same order, loaded in another process"

    def _loaders(self, tree: ast.Module) -> list[ast.Call]:
        train = train_loader(tree)
        return [c for c in dataloaders(tree) if c is not train and kwarg(c, "num_workers") is None]

    def applies(self, tree: ast.Module) -> bool:
        return train_loader(tree) is not None and bool(self._loaders(tree))

    def change(self, tree: ast.Module) -> None:
        for c in self._loaders(tree):
            c.keywords += [ast.keyword("num_workers", ast.Constant(1)),
                           ast.keyword("persistent_workers", ast.Constant(True))]


SAMPLER = '''
class {cls}({base}):
    """Each rank's share of the dataset, reshuffled every epoch from seed + epoch, padded or cut to
    an equal share: DistributedSampler's contract and order, written out."""

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0, drop_last=False):
        self.dataset = dataset
        self.num_replicas = dist.get_world_size() if num_replicas is None else num_replicas
        self.rank = dist.get_rank() if rank is None else rank
        self.shuffle, self.seed, self.drop_last = shuffle, seed, drop_last
        self.epoch = 0
        n = len(dataset)
        if drop_last and n % self.num_replicas:
            self.num_samples = {math}.ceil((n - self.num_replicas) / self.num_replicas)
        else:
            self.num_samples = {math}.ceil(n / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __iter__(self):
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            order = torch.randperm(len(self.dataset), generator=g).tolist()
        else:
            order = list(range(len(self.dataset)))
        if self.drop_last:
            order = order[:self.total_size]
        else:
            pad = self.total_size - len(order)
            order += (order * {math}.ceil(max(pad, 1) / len(order)))[:pad]
        return iter(order[self.rank:self.total_size:self.num_replicas])

    def __len__(self):
        return self.num_samples
'''


def _sampler_names(tree: ast.Module) -> set[str]:
    """The local names of torch's DistributedSampler."""
    out = set()
    for s in tree.body:
        if isinstance(s, ast.ImportFrom) and s.module in ("torch.utils.data", "torch.utils.data.distributed"):
            out |= {a.asname or a.name for a in s.names if a.name == "DistributedSampler"}
    return out


class HandWrittenSampler(Rewrite):
    name = "hand-written-sampler"
    why = "torch's DistributedSampler is replaced by the script's own class with its contract and its order (randperm seeded with seed + epoch, strided shards)"

    def applies(self, tree: ast.Module) -> bool:
        return bool(_sampler_names(tree)) and any(
            isinstance(n, ast.Name) and n.id in _sampler_names(tree) for n in ast.walk(tree))

    def change(self, tree: ast.Module) -> None:
        old = _sampler_names(tree)
        for s in list(tree.body):
            if isinstance(s, ast.ImportFrom) and s.module in ("torch.utils.data", "torch.utils.data.distributed"):
                s.names = [a for a in s.names if a.name != "DistributedSampler"]
                if not s.names:
                    tree.body.remove(s)
        math = add_import(tree, "math")
        base = add_import(tree, "torch.utils.data", "Sampler")
        cls = fresh(tree, "ShardSampler")
        for n in ast.walk(tree):
            if isinstance(n, ast.Name) and n.id in old:
                n.id = cls
        first_class = next((i for i, s in enumerate(tree.body) if isinstance(s, (ast.ClassDef, ast.FunctionDef))),
                           len(tree.body))
        tree.body[first_class:first_class] = snippet(SAMPLER.format(cls=cls, base=base, math=math))


class MicroBatches(Rewrite):
    name = "micro-batches"
    why = ("each batch is split in two micro-batches whose losses, weighted by their share of the rows, are "
           "backpropagated into one optimizer step (no_sync on the first): the same average gradient")

    def _plan(self, tree: ast.Module):
        loop = train_loop(tree)
        if loop is None or not isinstance(loop, ast.For):
            return None
        xs = stored(loop.target)
        if len(xs) != 2 or any(isinstance(n, (ast.For, ast.While)) and any(
                is_call(c, ".backward") for c in ast.walk(n)) for n in loop.body):
            return None  # a loop that already accumulates, or a batch of another shape
        body = loop.body
        back = next((i for i, s in enumerate(body) if isinstance(s, ast.Expr) and is_call(s.value, ".backward")), None)
        zero = next((i for i, s in enumerate(body) if isinstance(s, ast.Expr) and is_call(s.value, ".zero_grad")), None)
        if back is None or zero is None or zero > back:
            return None
        loss = [n.id for n in ast.walk(found_call(body[back], "the backward call").func) if isinstance(n, ast.Name)]
        # the forward: statements before the backward that depend on the batch (after it is on the device)
        start = max((i for i, s in enumerate(body[:back]) if stored(s) & xs), default=-1) + 1
        dep = set(xs)
        fwd: list[int] = []
        other: list[int] = []
        for i in range(start, back):
            if i == zero:
                continue
            (fwd if loaded(body[i]) & dep else other).append(i)
            if loaded(body[i]) & dep:
                dep |= stored(body[i])
        if not fwd or not set(loss) & dep or any(o > fwd[0] for o in other):
            return None
        if any(leaves_loop(body[i]) for i in fwd):
            return None  # a `continue` that skips the step would skip a micro-batch once moved
        return loop, start, back, zero, fwd, other, sorted(xs, key=lambda n: [
            x.id for x in ast.walk(loop.target) if isinstance(x, ast.Name)].index(n)), loss

    def applies(self, tree: ast.Module) -> bool:
        return self._plan(tree) is not None

    def change(self, tree: ast.Module) -> None:
        loop, start, back, zero, fwd, other, (xn, yn), loss_names = self._plan(tree)
        body = loop.body
        loss = next(n for n in loss_names if n not in ("scaler",) and n in set().union(*(stored(body[i]) for i in fwd)))
        ctx_mod = add_import(tree, "contextlib")
        ddp = ddp_assign(tree)
        parts, k, mx, my, total = (fresh(tree, n) for n in ("micro_parts", "micro", "micro_x", "micro_y",
                                                              "batch_loss_sum"))
        sync = (f"{ddp[0]}.no_sync() if {k} < len({parts}) - 1 else {ctx_mod}.nullcontext()" if ddp
                else f"{ctx_mod}.nullcontext()")
        new = snippet(f'''
            {parts} = list(zip({xn}.chunk(2), {yn}.chunk(2)))
            {total} = 0.0
            for {k}, ({mx}, {my}) in enumerate({parts}):
                with {sync}:
                    pass
                {total} = {total} + {loss}.detach() * ({mx}.shape[0] / {xn}.shape[0])
            {loss} = {total}
            ''')
        rename = {xn: mx, yn: my}
        fwd_stmts = [_Subst(rename).visit(body[i]) for i in fwd]
        backward = body[back]
        weight = ast.parse(f"{loss} * ({mx}.shape[0] / {xn}.shape[0])", mode="eval").body
        _LossWeight(loss, weight).visit(backward)
        micro_loop = found_as(new[2], ast.For, "the micro-batch loop")
        found_as(micro_loop.body[0], ast.With, "the no_sync block").body = [*fwd_stmts, backward]
        keep = [body[i] for i in range(start) if i != zero] + [body[i] for i in other]
        body[:] = keep + [body[zero]] + new + body[back + 1:]


class _Subst(ast.NodeTransformer):
    def __init__(self, m: dict[str, str]):
        self.m = m

    def visit_Name(self, node: ast.Name) -> ast.Name:
        if node.id in self.m and isinstance(node.ctx, ast.Load):
            return ast.Name(self.m[node.id], ast.Load())
        return node


class _LossWeight(ast.NodeTransformer):
    """``loss`` in the backward call becomes ``loss * (rows in this micro-batch / rows in the batch)``."""

    def __init__(self, loss: str, weighted: ast.expr):
        self.loss, self.weighted = loss, weighted

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return self.weighted if node.id == self.loss else node
