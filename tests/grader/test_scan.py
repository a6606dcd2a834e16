"""The static scan of a submission's source (flags for a human): what must be flagged, what must not,
and no flag on any script the kit ships."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.scan import scan_files, scan_source

FLAGGED = [
    # (snippet, words the finding must hold)
    ("from harness import instrument", "harness.instrument"),
    ("import harness.rundir", "harness.rundir"),
    ("from harness.channel import RecordWriter", "harness.channel"),
    ("import harness", "imports harness "),
    ("from grader.checks import REGISTRY", "grader.checks"),
    ("import ctypes", "ctypes"),
    ("from ctypes import CDLL", "ctypes"),
    ("import gc\nobjs = gc.get_objects()", "gc.get_objects"),
    ("from gc import get_objects", "gc.get_objects"),
    ("import sys\nsys.settrace(lambda *a: None)", "sys.settrace"),
    ("import sys\nsys.setprofile(None)", "sys.setprofile"),
    ("import threading\nthreading.settrace(f)", "threading.settrace"),
    ("open('/proc/self/environ').read()", "/proc"),
    ("p = f'/proc/{pid}/mem'", "/proc"),
    ("import os\nos.environ['TRAINWRECK_KEY']", "TRAINWRECK_KEY"),
    ("import os\nos.environ.get('TRAINWRECK_RUN_DIR')", "TRAINWRECK_RUN_DIR"),
    ("import os\nos.getenv('TRAINWRECK_CHANNEL')", "TRAINWRECK_CHANNEL"),
    ("x = f'TRAINWRECK_{name}'", "TRAINWRECK_"),
    ("open('../../solutions/memory-leak/train.py')", "solutions"),
    ("p = '/work/kit/.trainwreck/cache/memory-leak'", ".trainwreck"),
    ("from pathlib import Path\np = Path.home() / '.trainwreck'", ".trainwreck"),
    ("import os\nos.path.join(root, 'solutions')", "solutions"),
    ("p = 'lib/python3.11/site-packages/torch'", "site-packages"),
    ("open(site + '/usercustomize.py', 'w')", "usercustomize"),
    ("ds = SyntheticRegression(4096)\nx = ds.x", ".x of a kit dataset"),
    ("from harness.workloads import SyntheticRegression as S\nds = S(8)\ny = ds.y[0]", ".y of a kit dataset"),
    ("xs = loader.dataset.x", ".x of a kit dataset"),
    ("t = data.seqs[:10]", ".seqs"),
    ("b = records._blob", "._blob"),
    ("import torch\ntorch.save = lambda *a, **k: None", "replaces torch.save"),
    ("import torch as t\nt.load = my_load", "replaces torch.load"),
    ("import torch\ntorch.optim.Optimizer.step = fake_step", "torch.optim.Optimizer.step"),
    ("from torch.optim import SGD\nSGD.step = fake_step", "torch.optim.SGD.step"),
    ("import torch\nsetattr(torch, 'save', f)", "torch.save"),
    ("from harness.workloads import SyntheticRegression\nSyntheticRegression.__getitem__ = g",
     "harness.workloads.SyntheticRegression.__getitem__"),
    ("import harness.workloads as w\nw.MLP.forward = f", "harness.workloads.MLP.forward"),
    ("exec(payload)", "exec() of code that is not a literal"),
    ("eval(compile(src, 'x', 'exec'))", "eval()"),
    ("m = __import__(name)", "__import__() of a name that is not a literal"),
    ("import importlib\nm = importlib.import_module(mod)", "importlib.import_module() of a name"),
    ("m = __import__('harness.instrument')", "harness.instrument"),
]

CLEAN = [
    # the script's own dataset, named like a kit one: its storage is its own business
    "class SyntheticTokens:\n    def __init__(self):\n        self.seqs = []\nds = SyntheticTokens()\nt = ds.seqs[0]",
    "class SyntheticRegression:\n    def __init__(self):\n        self.x, self.y = 1, 2\nds = SyntheticRegression()\nx = ds.x",
    "from harness.workloads import MLP, SyntheticRegression, own_rng",
    "from harness import workloads",
    "import harness.workloads",
    "import torch\ntorch.backends.cudnn.benchmark = True",
    "import torch\ntorch.save({'model': m.state_dict()}, 'out/ckpt.pt')",
    "import torch\nstate = torch.load('out/ckpt.pt', weights_only=True)",
    "opt.step()\nopt.zero_grad(set_to_none=True)",
    "import os\nrank = int(os.environ['RANK'])\nws = int(os.environ.get('WORLD_SIZE', '1'))",
    "x, y = batch\nout = model(x)\nloss = (out - y).pow(2).mean()",
    "point.x = 1\nv = point.y",
    "CKPT_DIR = 'out/checkpoints'\nos.makedirs(CKPT_DIR, exist_ok=True)",
    "kv_cache = {}\ncache = {'hits': 0}",
    "eval_loss = evaluate(model)\nmodel.eval()",
    "cfg = eval('1 + 2')",
    "m = __import__('math')",
    "import importlib\nnp = importlib.import_module('numpy')",
    "import gc\ngc.collect()",
    "import sys\nprint(sys.argv)",
    "path = 'procedures/run.txt'",
]


@pytest.mark.parametrize("snippet, words", FLAGGED)
def test_flagged(snippet, words):
    found = scan_source(snippet, "train.py")
    assert found, snippet
    assert any(words in f.what for f in found), [f.what for f in found]
    assert all(f.file == "train.py" and f.line >= 1 for f in found)


@pytest.mark.parametrize("snippet", CLEAN)
def test_not_flagged(snippet):
    assert scan_source(snippet, "train.py") == [], snippet


def test_findings_name_the_line():
    found = scan_source("import torch\n\n\nimport ctypes\n", "train.py")
    assert [f.where for f in found] == ["train.py:4"]


def test_a_file_that_does_not_parse_gives_nothing():
    assert scan_source("def (:\n", "train.py") == []


@pytest.mark.parametrize("tree", ["exercises", "solutions"])
def test_no_flag_on_any_script_the_candidate_edits_as_shipped(tree):
    """The broken scripts and the reference fixes are what a candidate starts from and what an
    honest fix looks like: none of them may be flagged."""
    from grader.exercises import discover

    found, _ = discover()
    for ex in found:
        if ex.kind != "script":
            continue
        root = ex.dir if tree == "exercises" else ex.solution_dir
        assert scan_files(root, list(ex.manifest.editable)) == [], (ex.slug, tree)


def test_only_editable_python_files_are_scanned(tmp_path: Path):
    (tmp_path / "train.py").write_text("import ctypes\n")
    (tmp_path / "notes.txt").write_text("import ctypes\n")
    assert [f.where for f in scan_files(tmp_path, ["train.py", "notes.txt", "missing.py"])] == ["train.py:1"]
