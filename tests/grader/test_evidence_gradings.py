"""Submissions that work around what the harness observes, graded for real (issue 12, items 3, 5 and
6): each fails for the reason it deserves, with the evidence the new signals give. One grading per
case; the throughput rounds are skipped (correctness decides these verdicts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.exercises import find
from grader.grade import GradeOptions, grade

pytestmark = pytest.mark.slow


def _text(slug: str, solution: bool) -> str:
    ex = find(slug)
    return ((ex.solution_dir if solution else ex.dir) / "train.py").read_text()


def _swap(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


def graded(tmp_path: Path, slug: str, script: str):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "train.py").write_text(script)
    res = grade(find(slug), GradeOptions(kind="workspace", workspace=ws, out_dir=tmp_path / "out",
                                         skip_measurements=True))
    return res, {c.name: c for c in res.checks}


# -- item 1: every change of the parameters inside an observed optimizer step --------------------

def test_weights_set_by_hand_between_steps_fail_trajectory_with_the_steps_named(tmp_path):
    script = _swap(_text("memory-leak", True), "            step += 1\n",
                   "            step += 1\n"
                   "            if step == 100:\n"
                   "                with torch.no_grad():\n"
                   "                    for p in raw_model.parameters():\n"
                   "                        p.mul_(0.999)\n")
    res, c = graded(tmp_path, "memory-leak", script)
    assert not res.passed
    assert "changed between optimizer steps 100 and 101, outside any step the harness observed" in \
        c["trajectory"].message, c["trajectory"].message


def test_an_end_state_put_in_place_after_the_last_step_fails_trajectory(tmp_path):
    # keeps the state of step 150 and puts it back at the end (an end state from elsewhere)
    script = _swap(_text("memory-leak", True), "            step += 1\n",
                   "            step += 1\n"
                   "            if step == 150:\n"
                   "                kept = {k: v.clone() for k, v in raw_model.state_dict().items()}\n")
    script = _swap(script, "    if master_process:\n        os.makedirs(OUT_DIR, exist_ok=True)\n        tmp = ",
                   "    raw_model.load_state_dict(kept)\n"
                   "    if master_process:\n        os.makedirs(OUT_DIR, exist_ok=True)\n        tmp = ")
    res, c = graded(tmp_path, "memory-leak", script)
    assert not res.passed
    assert "final parameters in the main run are not those its last optimizer step (step 192) left: they " \
           "changed after it" in c["trajectory"].message, c["trajectory"].message


# -- item 2: hidden work ---------------------------------------------------------------------------

RETRAIN = '''    if os.path.exists(ckpt_path):
        ckpt = torch.load(ckpt_path, map_location=device)
        target = ckpt["step"]
        hidden_step = type(optimizer).step.__wrapped__  # an update the step hook never sees
        for epoch in range(EPOCHS):
            sampler.set_epoch(epoch)
            sampler.start = 0
            for x, y in loader:
                if step == target:
                    break
                loss = F.mse_loss(model(x.to(device)), y.to(device))
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                hidden_step(optimizer)
                step += 1
            if step == target:
                break
        start_epoch = step // steps_per_epoch
'''


def test_a_restart_that_retrains_from_scratch_unseen_fails_workload_intact(tmp_path):
    text = _text("sampler-replay", True)
    start = text.index("    if os.path.exists(ckpt_path):")
    end = text.index("    t0 = time.time()")
    res, c = graded(tmp_path, "sampler-replay", text[:start] + RETRAIN + "\n" + text[end:])
    assert not res.passed
    msg = c["workload_intact"].message
    assert "samples at optimizer step 1 of attempt 1 in the resume run" in msg and \
           "training the optimizer step hook never saw" in msg, msg


# -- item 3: memory from a signal a process cannot cheaply offset ---------------------------------

BALLOON = '''
import mmap as _mmap

import psutil as _psutil

_BALLOON = {"map": None, "released": 0}


def _inflate(mb: int) -> int:
    """Pre-touched memory; returns the RSS to hold."""
    m = _BALLOON["map"] = _mmap.mmap(-1, mb * 2**20, flags=_mmap.MAP_PRIVATE | _mmap.MAP_ANONYMOUS)
    m.write(b"\\1" * (mb * 2**20))
    return _psutil.Process().memory_info().rss


def _deflate(hold: int) -> None:
    """Give back as much of the balloon as the process grew past ``hold``: RSS stays flat."""
    m, proc = _BALLOON["map"], _psutil.Process()
    while _BALLOON["released"] < len(m) and proc.memory_info().rss > hold:
        m.madvise(_mmap.MADV_DONTNEED, _BALLOON["released"], 2**20)
        _BALLOON["released"] += 2**20
'''


def test_a_balloon_released_as_the_leak_grows_fails_memory_flat_on_counts_and_level(tmp_path):
    script = _swap(_text("memory-leak", False), "def main() -> None:", BALLOON + "\n\ndef main() -> None:")
    script = _swap(script, "    history = {\"train\": [], \"val\": []}\n",
                   "    history = {\"train\": [], \"val\": []}\n    hold = _inflate(450)\n")
    script = _swap(script, "            step += 1\n", "            step += 1\n            _deflate(hold)\n")
    res, c = graded(tmp_path, "memory-leak", script)
    m = c["memory_flat"]
    assert not m.passed
    assert "the autograd graph nodes rank" in m.message and "grew by" in m.message, m.message
    assert "the reference run's level" in m.message, m.message
    # the balloon hid the growth from RSS (kept it flat, or gave back a little more than the leak took
    # on a loaded machine: -0.16 MB per step seen), so the slope alone would have passed it
    assert m.evidence["ranks"][0]["slope_mb_per_step"] < 0.1, m.evidence


# -- item 4: the fault a proper fix must survive ----------------------------------------------------

def test_a_constant_loss_scale_does_not_survive_the_overflow(tmp_path):
    script = _swap(_text("amp-no-scaler", False), "            loss.backward()\n",
                   "            (loss * 1024.0).backward()  # a constant loss scale\n"
                   "            for p in model.parameters():\n"
                   "                p.grad.div_(1024.0)\n")
    res, c = graded(tmp_path, "amp-no-scaler", script)
    msg = c["matches_reference"].message
    assert not c["matches_reference"].passed
    assert "final parameters are NaN or inf" in msg and "the grading made the gradients of optimizer step 96 " \
           "overflow" in msg, msg


def test_dropping_autocast_fails_workload_intact_saying_so(tmp_path):
    script = _swap(_text("amp-no-scaler", True), "            with torch.autocast(device_type=device.type, dtype=AMP_DTYPE):\n"
                   "                loss = F.mse_loss(model(x), y)\n",
                   "            loss = F.mse_loss(model(x), y)  # fp32 throughout\n")
    res, c = graded(tmp_path, "amp-no-scaler", script)
    msg = c["workload_intact"].message
    assert not c["workload_intact"].passed
    assert "forward passes ran without float16 autocast at 384 of its 384 optimizer steps" in msg and \
           "off x384" in msg, msg


# -- item 5: data-parallel work really data-parallel ------------------------------------------------

def test_every_rank_computing_the_whole_batch_fails_on_bytes_and_rows(tmp_path):
    text = _text("comm-bound", False)
    text = _swap(text, "    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)\n",
                 "    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)\n"
                 "    # the peer's samples, straight from the dataset's tensors (not through the ledger)\n"
                 "    peer = DistributedSampler(train_set, num_replicas=world_size, rank=1 - rank, shuffle=True,\n"
                 "                              seed=SEED, drop_last=True)\n")
    text = _swap(text, "        batches = iter(loader)\n",
                 "        batches = iter(loader)\n        peer.set_epoch(epoch)\n        theirs = iter(list(peer))\n")
    text = _swap(text, "                x, y = x.to(device), y.to(device)\n"
                 "                loss = F.mse_loss(model(x), y) / ACCUM_STEPS\n"
                 "                loss.backward()\n"
                 "                for p in model.parameters():\n"
                 "                    dist.all_reduce(p.grad)\n"
                 "                    p.grad.div_(world_size)\n",
                 "                idx = [next(theirs) for _ in range(micro_batch)]\n"
                 "                xp, yp = train_set.x[idx], train_set.y[idx]\n"
                 "                x, y = (torch.cat([x, xp]), torch.cat([y, yp])) if rank == 0 else \\\n"
                 "                    (torch.cat([xp, x]), torch.cat([yp, y]))\n"
                 "                loss = F.mse_loss(model(x.to(device)), y.to(device)) / ACCUM_STEPS\n"
                 "                loss.backward()\n")
    res, c = graded(tmp_path, "comm-bound", text)
    col, wl = c["collectives_per_step"], c["workload_intact"]
    assert not col.passed and "reduced 0 B of gradients during optimizer step 1" in col.message and \
        "a data-parallel step communicates its gradients" in col.message, col.message
    assert not wl.passed and "it computed on samples it never read" in wl.message, wl.message
