"""A torch.save outside the working directory is a behaviour flag from the save trace (grader.flags):
torch writes a path with its own C++ file writer, which the audit hook's open events never see (the
hostile suite's computed-names saved to /var/tmp, unflagged)."""

from __future__ import annotations

from grader import flags
from tests.grader.rundirs import RunDirBuilder


def test_a_save_outside_the_working_directory_is_flagged_once(tmp_path):
    root = tmp_path / "main"
    work = str((root / "work").resolve())
    b = RunDirBuilder(root)
    paths = [f"{work}/out/ckpt.pt", "/tmp/x.pt", "/dev/shm/y.pt", "/var/tmp/.flat.pt", "/var/tmp/.flat.pt",
             "relative.pt", "/home/someone/.cache/p.pt", f"{work}/../beside-work.pt"]
    for i, p in enumerate(paths):
        b.save_record(0, a=0, t=1.0, step=3, main=True, seq=i, ph="begin", op="save", path=p)
        b.save_record(0, a=0, t=1.1, step=3, main=True, seq=i, ph="end", op="save", dur=0.1, bytes=10)
    b.event(0, kind="step", attempt=0, t=1.0, step=1, dt=1.0, rss_mb=1.0)
    found = [f.what for f in flags.run_flags("main", b.build()) if f.kind == "behaviour"]
    assert found == ["rank 0 called torch.save outside the working directory: /var/tmp/.flat.pt (the save trace)",
                     "rank 0 called torch.save outside the working directory: /home/someone/.cache/p.pt "
                     "(the save trace)",
                     f"rank 0 called torch.save outside the working directory: {root.resolve()}/beside-work.pt "
                     "(the save trace)"], found  # beside the work dir, in a run dir under /tmp: still outside
