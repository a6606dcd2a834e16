"""Naming the rank that caused a failed launch, from the ranks' records and the launcher's log."""

from __future__ import annotations

import pytest

from harness.failure import excerpt, find_failure, is_peer_loss, is_timeout, launcher_exit_codes
from harness.observe import RankObservation

PEER = "RuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:48310."
TIMEOUT = ("torch.distributed.DistBackendError: [../gloo/transport/tcp/unbound_buffer.cc:81] Timed out "
           "waiting 60000ms for recv operation to complete")
OWN = 'Traceback (most recent call last):\n  File "/w/train.py", line 9, in <module>\nValueError: bad batch'


def launcher_log(*failures: tuple[int, int], root: int | None = None) -> str:
    """The failure block torchrun prints when its workers fail, for the given (rank, exitcode)s."""
    def entry(rank, code):
        return (f"[{rank}]:\n  time      : 2026-11-22_10:58:35\n  host      : localhost\n"
                f"  rank      : {rank} (local_rank: {rank})\n  exitcode  : {code} (pid: 1{rank})\n"
                "  error_file: <N/A>\n  traceback : Signal 9 (SIGKILL) received by PID 1\n")
    root = failures[0][0] if root is None else root
    others = "".join(entry(r, c) for r, c in failures if r != root) or "  <NO_OTHER_FAILURES>\n"
    return ("E1122 ... failed (exitcode: -9) local_rank: 1 (pid: 11) of binary: python\n"
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n" + "=" * 40 +
            "\nharness.bootstrap FAILED\n" + "-" * 40 + "\nFailures:\n" + others + "-" * 40 +
            "\nRoot Cause (first observed failure):\n" + entry(root, dict(failures)[root]) + "=" * 40 + "\n")


def test_launcher_exit_codes_reads_the_last_failure_block():
    first_attempt = launcher_log((0, 1))
    text = first_attempt + "restarting...\n" + launcher_log((1, -9), (0, -15), root=1)
    assert launcher_exit_codes(text) == ({1: -9, 0: -15}, 1)
    assert launcher_exit_codes("all good\n") == ({}, None)


@pytest.mark.parametrize("error, lost", [
    (PEER, True),
    ("torch.distributed.DistBackendError: NCCL communicator was aborted on rank 0.", True),
    (OWN, False),
    ("ValueError: Connection closed by peer appears in this message, but not on its last line\nKeyError: 3", False),
    (None, False),
    (TIMEOUT, False),  # waited out the timeout: the peer may well be alive
])
def test_is_peer_loss(error, lost):
    assert is_peer_loss(error) is lost


def test_is_timeout():
    assert is_timeout(TIMEOUT) and not is_timeout(PEER) and not is_timeout(OWN) and not is_timeout(None)


def obs(rank, status=None, error=None, t=None, fault=False, steps=5):
    return RankObservation(rank=rank, exit_status=status, error=error, exit_t=t, steps=steps,
                           exit_code=None if status is None else (0 if status == "ok" else 1),
                           fault={"what": "sigkill", "step": steps, "t": 1.0} if fault else None)


@pytest.mark.parametrize("ranks, log, rank, reason", [
    # a rank's own exception is the cause, even when its peer's (consequential) error came first
    ([obs(0, "exception", PEER, t=1.0), obs(1, "exception", OWN, t=2.0)], launcher_log((0, 1), (1, 1)), 1, "exception"),
    # of two real exceptions, the earlier
    ([obs(0, "exception", OWN, t=3.0), obs(1, "exception", OWN, t=2.0)], "", 1, "exception"),
    # a non-zero sys.exit counts as the rank's own failure
    ([obs(0, "sysexit", None, t=3.0), obs(1, "exception", PEER, t=2.0)], "", 0, "exception"),
    # killed by the harness: no exit record, and the peer's lost-peer error does not hide it
    ([obs(0, "exception", PEER, t=1.0), obs(1, fault=True)], launcher_log((0, 1), (1, -9)), 1,
     "killed by the harness (fault injection)"),
    # killed from outside (the OOM killer); the launcher's root cause (rank 0, same second) is wrong
    ([obs(0, "exception", PEER, t=1.0), obs(1)], launcher_log((0, 1), (1, -9)), 1, "killed by signal 9"),
    # the launcher's SIGTERM of a survivor is never the cause
    ([obs(0), obs(1, "exception", PEER, t=1.0)], launcher_log((0, -15), (1, 1), root=1), 1, "lost a peer"),
    # os._exit(3): no record, a positive code
    ([obs(0), obs(1, "ok", t=1.0)], launcher_log((0, 3)), 0, "exited with code 3 without an exit record"),
    # rank 1 timed out waiting while rank 0 (evaluating) was alive and later lost it: not "lost a peer"
    ([obs(0, "exception", PEER, t=70.0), obs(1, "exception", TIMEOUT, t=63.0)], launcher_log((0, 1), (1, 1), root=0),
     1, "timed out in a collective"),
    # only SIGTERMed ranks and no other clue: the launcher's root cause
    ([obs(0), obs(1)], launcher_log((0, -15), (1, -15), root=1), 1, "first failure reported by the launcher (exit code -15)"),
])
def test_find_failure(tmp_path, ranks, log, rank, reason):
    (tmp_path / "launcher.log").write_text(log)
    f = find_failure(tmp_path, ranks)
    assert (f["rank"], f["reason"]) == (rank, reason)
    assert f["error"]


def test_failure_without_any_rank_is_the_launchers(tmp_path):
    (tmp_path / "launcher.log").write_text("RendezvousTimeoutError: ...\n")
    f = find_failure(tmp_path, [])
    assert f["rank"] is None and "RendezvousTimeoutError" in f["error"]


def test_note_when_the_lost_peer_had_simply_finished(tmp_path):
    ranks = [obs(0, "exception", PEER, t=5.0, steps=4), obs(1, "ok", t=4.0, steps=3)]
    f = find_failure(tmp_path, ranks)
    assert f["rank"] == 0 and f["reason"] == "lost a peer"
    assert f["note"] == ("rank 1 (after step 3) had already exited normally while rank 0 still waited "
                         "for it in a collective")


def test_sys_exit_is_named_as_such(tmp_path):
    ranks = [obs(0, "exception", PEER, t=2.0), obs(1, "sysexit", None, t=1.0, steps=2)]
    ranks[1].exit_code = 3
    f = find_failure(tmp_path, ranks)
    assert f["rank"] == 1 and f["error"].endswith("(no Python traceback: the process called sys.exit(3) after optimizer step 2)")


def test_killed_rank_error_says_how_it_ended(tmp_path):
    (tmp_path / "launcher.log").write_text(launcher_log((1, -9)))
    rdir = tmp_path / "ranks" / "1"
    rdir.mkdir(parents=True)
    (rdir / "stderr.log").write_text("=== attempt 0 (pid 11) ===\nsome warning\n")
    f = find_failure(tmp_path, [obs(0), obs(1, steps=7)])
    assert f["error"].endswith("some warning\n(no Python traceback: the process died of signal 9 after optimizer step 7)")


LONG = """Traceback (most recent call last):
  File "/w/train.py", line 40, in <module>
    main()
  File "/w/train.py", line 31, in main
    loss = model(x)
""" + "".join(f"""  File "/x/site-packages/torch/nn/modules/module.py", line {i}, in _call_impl
    return forward_call(*args, **kwargs)
""" for i in range(1700, 1712)) + """  File "/w/model.py", line 12, in forward
    return self.net(x) @ self.w
""" + "".join(f"""  File "/x/site-packages/torch/nn/modules/linear.py", line {i}, in forward
    return F.linear(input, self.weight, self.bias)
""" for i in range(120, 124)) + "RuntimeError: mat1 and mat2 shapes cannot be multiplied (8x16 and 32x1)"


def test_excerpt_keeps_the_scripts_frames_and_cuts_library_ones():
    out = excerpt(LONG).splitlines()
    assert out[0] == "Traceback (most recent call last):"
    mine = [line for line in out if line.startswith('  File "/w/')]
    assert mine == ['  File "/w/train.py", line 40, in <module>', '  File "/w/train.py", line 31, in main',
                    '  File "/w/model.py", line 12, in forward']
    assert out[-1].startswith("RuntimeError: mat1 and mat2")
    assert any(line.startswith("  ... (") and "library frames" in line for line in out)
    assert len(out) <= 20 < len(LONG.splitlines())


def test_excerpt_of_a_short_traceback_is_the_traceback():
    assert excerpt(OWN) == OWN
