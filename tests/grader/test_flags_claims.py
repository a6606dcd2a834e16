"""A rank started by two processes, and a planned kill that hit a decoy (grader.flags): the parent's
monitor takes the pid of the last start record it got as the rank's, so a child of the script that
sends one, and the fault's record, takes the kill while the rank trains on (the hostile suite's
decoy-takes-the-kill: a 'marked' kill in run.json, no flag)."""

from __future__ import annotations

from grader import flags
from harness import rundir
from tests.grader.rundirs import RunDirBuilder


def _run(root, decoy: bool, kill: bool = True, ran_on: bool = False, stamped: bool = False):
    b = RunDirBuilder(root)
    for r in range(2):
        b.event(r, kind="boot", attempt=0, t=0.0, pid=100 + r, rank=r)
        b.event(r, kind="start", attempt=0, t=1.0, pid=100 + r, rank=r)
        b.event(r, kind="boot", attempt=1, t=5.0, pid=200 + r, rank=r)  # the restart: a new process
    if decoy and stamped:  # today's channel: the rank's pid, the sender's beside it
        b.event(1, kind="start", attempt=0, t=1.5, pid=101, sender_pid=999, rank=1)
    elif decoy:  # the channel before 2e0174c's finding: the sender's pid as the rank's
        b.event(1, kind="start", attempt=0, t=1.5, pid=999, rank=1)
    for s in range(44, 50 if ran_on else 46):
        b.event(1, kind="step", attempt=0, t=2.0 + s / 100, step=s, dt=0.01, rss_mb=1.0)
        if s == 45:
            b.event(1, kind="fault", attempt=0, t=2.5, what="sigkill", step=45)
    run = b.build()
    meta = rundir.load_run(run)
    meta["faults_injected"] = [{"rank": 1, "attempt": 0, "when": "step", "planned_step": 45, "seen_step": 50,
                                "pid": 999 if decoy else 101, "killed": 1, "t": 3.0, "how": "marked"}] if kill else []
    rundir.atomic_write_json(run / "run.json", meta)
    return run


def test_a_decoy_that_took_the_kill_is_flagged(tmp_path):
    found = [(f.kind, f.what) for f in flags.run_flags("main", _run(tmp_path / "main", decoy=True))]
    assert ("tampering", "rank 1 was started by 2 processes (pids 101, 999): a process other than the rank's own "
            "sent a boot or start record, claiming to be it") in found, found
    assert any(k == "fault" and "hit pid 999, not the rank's own process (pid 101" in w for k, w in found), found


def test_a_decoy_the_channel_stamped_with_the_rank_s_pid_is_still_named(tmp_path):
    found = [(f.kind, f.what) for f in flags.run_flags("main", _run(tmp_path / "main", decoy=True, stamped=True))]
    assert ("tampering", "rank 1 was started by 2 processes (pids 101, 999): a process other than the rank's own "
            "sent a boot or start record, claiming to be it") in found, found


def test_a_kill_of_the_rank_itself_and_a_restart_raise_nothing(tmp_path):
    assert flags.run_flags("main", _run(tmp_path / "main", decoy=False)) == []


def test_a_mark_the_rank_ran_past_with_no_kill_is_flagged(tmp_path):
    found = [(f.kind, f.what) for f in flags.run_flags("main", _run(tmp_path / "main", decoy=True, kill=False,
                                                                      ran_on=True))]
    assert ("fault", "rank 1 marked its planned kill at step 45, where the harness's hook waits to be killed, yet "
            "went on to step 49: no kill was performed (a decoy sent the mark, or the hook was bypassed)") in found, found
