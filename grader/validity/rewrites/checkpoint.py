"""Rewrites of the checkpoint: its keys renamed and nested (on the save and the resume side alike),
RNG state added, the bytes serialised in memory and written with open(), the DDP wrapper's state
dict (``module.`` names), and the write moved to a background thread or process."""

from __future__ import annotations

import ast
import builtins

from grader.validity.rewrites.base import Rewrite, found, found_as, found_call
from grader.validity.source import (
    add_import,
    bodies,
    checkpoint_dicts,
    ddp_assign,
    dotted,
    fresh,
    globals_of,
    insert_module_defs,
    is_call,
    loaded,
    loaded_checkpoints,
    main_fn,
    snippet,
    stored,
)

KEYS = {"model": "model_state", "optimizer": "optim_state", "scheduler": "lr_schedule", "scaler": "grad_scaler",
        "step": "global_step", "epoch": "epoch_done", "val_loss": "held_out_loss", "test_loss": "test_set_loss",
        "test_tokens": "test_set_tokens", "rng": "random_state"}


def _reads(tree: ast.Module) -> list[ast.Subscript]:
    """``ckpt["key"]`` where ``ckpt`` is what torch.load returned."""
    loads = loaded_checkpoints(tree)
    return [n for n in ast.walk(tree) if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name)
            and n.value.id in loads and isinstance(n.slice, ast.Constant) and isinstance(n.slice.value, str)]


def _keys(d: ast.Dict) -> list[ast.Constant]:
    """A checkpoint dict's keys (``checkpoint_dicts`` keeps only dicts whose keys are all strings)."""
    return [found_as(k, ast.Constant, "a checkpoint key") for k in d.keys]


def _read_key(r: ast.Subscript) -> ast.Constant:
    """The key ``ckpt["key"]`` reads (``_reads`` keeps only string keys)."""
    return found_as(r.slice, ast.Constant, "a checkpoint read's key")


def _text(key: ast.Constant) -> str:
    return found_as(key.value, str, "a checkpoint key's text")


class CheckpointKeys(Rewrite):
    name = "checkpoint-keys"
    why = "the checkpoint's keys are renamed where it is written and where the resume reads it: the same state under other names"

    def applies(self, tree: ast.Module) -> bool:
        return bool(checkpoint_dicts(tree))

    def change(self, tree: ast.Module) -> None:
        for d in checkpoint_dicts(tree):
            for k in _keys(d):
                k.value = KEYS.get(_text(k), f"saved_{_text(k)}")
        for r in _reads(tree):
            key = _read_key(r)
            key.value = KEYS.get(_text(key), f"saved_{_text(key)}")


class CheckpointNested(Rewrite):
    name = "checkpoint-nested"
    why = 'the checkpoint is two levels deep, {"state": {model, optimizer, ...}, "progress": {step, ...}}, read back the same way'

    def applies(self, tree: ast.Module) -> bool:
        return bool(checkpoint_dicts(tree))

    def change(self, tree: ast.Module) -> None:
        group: dict[str, str] = {}
        for d in checkpoint_dicts(tree):
            state = [(k, v) for k, v in zip(_keys(d), d.values) if is_call(v, ".state_dict")]
            rest = [(k, v) for k, v in zip(_keys(d), d.values) if not is_call(v, ".state_dict")]
            for k, _ in state:
                group[_text(k)] = "state"
            for k, _ in rest:
                group[_text(k)] = "progress"
            d.keys = [ast.Constant("state"), *([ast.Constant("progress")] if rest else [])]
            d.values = [ast.Dict([k for k, _ in state], [v for _, v in state]),
                        *([ast.Dict([k for k, _ in rest], [v for _, v in rest])] if rest else [])]
        for r in _reads(tree):
            key = _text(_read_key(r))
            if key in group:
                ckpt = found_as(r.value, ast.Name, "the loaded checkpoint's name")
                r.value = ast.Subscript(ast.Name(ckpt.id, ast.Load()), ast.Constant(group[key]), ast.Load())


class CheckpointRng(Rewrite):
    name = "checkpoint-rng"
    why = "the checkpoint also holds Python's and torch's RNG state, restored on resume; nothing in the job draws from them"

    def applies(self, tree: ast.Module) -> bool:
        return bool(checkpoint_dicts(tree))

    def change(self, tree: ast.Module) -> None:
        random = add_import(tree, "random")
        for d in checkpoint_dicts(tree):
            d.keys.append(ast.Constant("rng"))
            d.values.append(ast.parse(f'{{"python": {random}.getstate(), "torch": torch.get_rng_state()}}',
                                      mode="eval").body)
        loads = loaded_checkpoints(tree)
        for body in list(bodies(tree)):
            for i, s in reversed(list(enumerate(body))):
                if isinstance(s, ast.Assign) and is_call(s.value, "torch.load") and stored(s) & loads:
                    ck = next(iter(stored(s) & loads))
                    body[i + 1:i + 1] = snippet(f'''
                        {random}.setstate({ck}["rng"]["python"])
                        torch.set_rng_state({ck}["rng"]["torch"].cpu())
                        ''')


class SaveViaBytes(Rewrite):
    name = "save-via-bytes"
    why = "the checkpoint is serialised into memory, then its bytes are written to the same file with open()"

    def _saves(self, tree: ast.Module) -> list[ast.Expr]:
        return [s for s in ast.walk(tree) if isinstance(s, ast.Expr) and is_call(s.value, "torch.save")
                and len(s.value.args) == 2 and not s.value.keywords]

    def applies(self, tree: ast.Module) -> bool:
        return bool(self._saves(tree))

    def change(self, tree: ast.Module) -> None:
        io = add_import(tree, "io")
        files = {n.optional_vars.id for n in ast.walk(tree) if isinstance(n, ast.withitem)
                 and isinstance(n.optional_vars, ast.Name)}
        saves = self._saves(tree)
        for body in list(bodies(tree)):
            for i, s in enumerate(body):
                if not any(s is x for x in saves):
                    continue
                buf, f = fresh(tree, "buf"), fresh(tree, "fh")
                obj, dest = found_call(s, "torch.save()").args
                if isinstance(dest, ast.Name) and dest.id in files:  # already an open file
                    new = found_as(snippet(f"""
                        with {io}.BytesIO() as {buf}:
                            torch.save(OBJ, {buf})
                            DEST.write({buf}.getvalue())
                        """)[0], ast.With, "the BytesIO block")
                    found_as(found_call(new.body[1], "DEST.write()").func, ast.Attribute, "DEST.write").value = dest
                else:
                    new = found_as(snippet(f"""
                        with {io}.BytesIO() as {buf}:
                            torch.save(OBJ, {buf})
                            with open(DEST, "wb") as {f}:
                                {f}.write({buf}.getvalue())
                        """)[0], ast.With, "the BytesIO block")
                    opened = found_as(new.body[1], ast.With, "the with open() block").items[0].context_expr
                    found_as(opened, ast.Call, "open()").args[0] = dest
                found_call(new.body[0], "torch.save()").args[0] = obj
                body[i] = new


class DdpStateDict(Rewrite):
    name = "ddp-state-dict"
    why = "the checkpoint holds the DDP wrapper's state dict (every name prefixed module.) and the resume loads it into the wrapper"

    def _calls(self, tree: ast.Module) -> list[ast.Call]:
        main, ddp = main_fn(tree), ddp_assign(tree)
        if main is None or ddp is None or not any(isinstance(s, ast.Assign) and dotted(s.value) == ddp[0]
                                                   and stored(s) == {"raw_model"} for s in main.body):
            return []
        after = main.body[main.body.index(ddp[1]) + 1:] if ddp[1] in main.body else []
        return [c for s in after for c in ast.walk(s) if is_call(c, "raw_model.state_dict", "raw_model.load_state_dict")]

    def applies(self, tree: ast.Module) -> bool:
        return bool(self._calls(tree))

    def change(self, tree: ast.Module) -> None:
        ddp = found(ddp_assign(tree), "the DDP wrapper")[0]
        for c in self._calls(tree):
            found_as(c.func, ast.Attribute, "raw_model's method").value = ast.Name(ddp, ast.Load())


CONTINUES = ("os.replace", "os.rename", "os.fsync", "os.open", "os.close", ".replace")

WRITER = '''
class {cls}:
    """Runs one checkpoint write at a time off the training thread, on {what}. The next submit and
    the end of the job wait for the one in flight; a write that failed is raised there."""

    def __init__(self):
        self._job = None
        self._error = None

    def submit(self, fn, *args):
        self.wait()
        {start}

    def _run(self, fn, args):
        try:
            fn(*args)
        except BaseException as e:
            self._error = e

    def wait(self):
        if self._job is not None:
            self._job.join()
            {joined}
            self._job = None
        if self._error is not None:
            error, self._error = self._error, None
            raise RuntimeError("writing a checkpoint failed") from error


def {copy}(obj):
    """A snapshot of a (nested) state: tensors as detached CPU copies, so training can go on."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {{k: {copy}(v) for k, v in obj.items()}}
    if isinstance(obj, (list, tuple)):
        return type(obj)({copy}(v) for v in obj)
    return obj
'''

THREAD = dict(what="a background thread",
              start='self._job = threading.Thread(target=self._run, args=(fn, args), name="checkpoint-writer", daemon=True)\n        self._job.start()',
              joined="pass")
PROCESS = dict(what="a forked process",
               start='self._job = multiprocessing.get_context("fork").Process(target=fn, args=args, name="checkpoint-writer", daemon=True)\n        self._job.start()',
               joined='if self._job.exitcode != 0:\n                self._error = RuntimeError(f"the checkpoint writer exited with {self._job.exitcode}")')


class _Site:
    """One checkpoint write: the statement list, where the write starts and ends, its object."""

    def __init__(self, body, start, stop, save: ast.Call):
        self.body, self.start, self.stop, self.save = body, start, stop, save


def _sites(tree: ast.Module) -> list[_Site]:
    glob = globals_of(tree)
    out = []
    for body in bodies(tree):
        for i, s in enumerate(body):
            saves = [c for c in ast.walk(s) if is_call(c, "torch.save")]
            if len(saves) != 1 or isinstance(s, (ast.FunctionDef, ast.ClassDef, ast.For, ast.While, ast.If, ast.Try)):
                continue
            obj_names = loaded(saves[0].args[0]) if saves[0].args else set()
            block = (names_of(s) - obj_names) - glob
            j = i + 1
            while j < len(body) and (any(is_call(c, *CONTINUES) for c in ast.walk(body[j]))
                                     or (names_of(body[j]) - glob) & block):
                if any(is_call(c, "dist.barrier", ".all_reduce", "print") for c in ast.walk(body[j])):
                    break
                block |= names_of(body[j]) - glob
                j += 1
            later = set().union(*(loaded(x) for x in body[j:])) if body[j:] else set()
            made = set().union(*(stored(x) for x in body[i:j]))
            if made & later:
                continue
            out.append(_Site(body, i, j, saves[0]))
    # a write inside another (the torch.save in a with block that is itself one): the outer one only
    return [a for a in out if not any(b is not a and any(x is a.body[a.start] for s in b.body[b.start:b.stop]
                                                         for x in ast.walk(s)) for b in out)]


def names_of(node: ast.AST) -> set[str]:
    return stored(node) | loaded(node)


class _WriteOffLoop(Rewrite):
    kind: dict

    def applies(self, tree: ast.Module) -> bool:
        # a script that already starts threads or processes of its own writes off the loop already
        own = {a.name.split(".")[0] for s in tree.body if isinstance(s, ast.Import) for a in s.names} | {
            (s.module or "").split(".")[0] for s in tree.body if isinstance(s, ast.ImportFrom)}
        return main_fn(tree) is not None and bool(_sites(tree)) and not own & {"threading", "multiprocessing",
                                                                               "concurrent"}

    def change(self, tree: ast.Module) -> None:
        mod = "threading" if self.kind is THREAD else "multiprocessing"
        add_import(tree, mod)
        cls, inst, copy = fresh(tree, "CheckpointWriter"), fresh(tree, "CHECKPOINT_WRITER"), fresh(tree, "cpu_snapshot")
        glob = globals_of(tree) | set(dir(builtins))
        defs = snippet(WRITER.format(cls=cls, copy=copy, **self.kind)) + snippet(f"{inst} = {cls}()")
        for n, site in reversed(list(enumerate(_sites(tree)))):  # later sites first: indices stay valid
            fn = fresh(tree, f"write_checkpoint_{n}")
            stmts = site.body[site.start:site.stop]
            obj = site.save.args[0]
            state = fresh(tree, "state_snapshot")
            site.save.args[0] = ast.Name(state, ast.Load())
            made = set().union(*(stored(s) for s in stmts))
            params = sorted(set().union(*(loaded(s) for s in stmts)) - made - glob - {state})
            defn = found_as(snippet(f"def {fn}({', '.join([state, *params])}):\n    pass")[0], ast.FunctionDef,
                            "the write function")
            defn.body = stmts
            defs.append(defn)
            call = snippet(f"{inst}.submit({fn}, {copy}(OBJ), {', '.join(params)})")[0]
            found_as(found_call(call, "submit()").args[1], ast.Call, "the snapshot call").args[0] = obj
            site.body[site.start:site.stop] = [call]
        insert_module_defs(tree, defs)
        main = found(main_fn(tree), "main")
        end = next((i for i, s in enumerate(main.body) if isinstance(s, ast.Expr)
                    and is_call(s.value, "dist.destroy_process_group")), len(main.body))
        main.body.insert(end, snippet(f"{inst}.wait()")[0])


class WriteFromThread(_WriteOffLoop):
    name = "write-from-thread"
    why = "each checkpoint write runs on a background thread from a CPU snapshot taken at the step; one in flight, all done before exit"
    kind = THREAD
    conflicts = ("write-from-process",)


class WriteFromProcess(_WriteOffLoop):
    name = "write-from-process"
    why = "each checkpoint write runs in a forked process from a CPU snapshot taken at the step; one in flight, all done before exit"
    kind = PROCESS
    conflicts = ("write-from-thread",)
