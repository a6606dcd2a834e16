# ruff: noqa
# A forked child of the rank speaks on the rank's record channel for itself: it waits until the
# rank is training, then sends a boot and a start record claiming to be the other rank, and a full
# run of step records with a flat 300 MB, claiming to be attempt 1 (a later attempt, whose steps
# the memory check would read instead of the leaking attempt 0's). The rank itself leaks on.
_CHILD_WAIT_S = 1.0  # the rank trains for about 2 s after main() starts (4 s outlived it from 2026-11-27)


def _claim_in_a_child():
    path = _os.environ.get("TRAINWRECK_CHANNEL")
    if not path:
        return
    if _os.fork() != 0:
        return
    code = 0
    try:
        import socket

        _time.sleep(_CHILD_WAIT_S)
        other = 1 - _rank() if _rank() in (0, 1) else 0
        now = _time.time()
        recs = [{"kind": "boot", "attempt": 1, "t": now, "pid": 1000 + other, "rank": other},
                {"kind": "start", "attempt": 1, "t": now, "pid": 1000 + other, "rank": other, "world_size": 2}]
        recs += [{"kind": "step", "attempt": 1, "step": s, "t": now + 0.001 * s, "dt": 0.02, "rss_mb": 300.0,
                  "lr": [1e-3]} for s in range(1, 193)]
        s = socket.socket(socket.AF_UNIX)
        s.connect(path)
        lines = [_json.dumps({"v": 1, "mode": "records", "pid": _os.getpid()})]
        lines += [_json.dumps({"s": "events.jsonl", "r": r}) for r in recs]
        s.sendall(("\n".join(lines) + "\n").encode())
        s.close()
    except BaseException as e:
        print(f"the child's claim failed: {e!r}", file=_sys.stderr)
        code = 1
    _os._exit(code)


def _attack_run(main):
    _claim_in_a_child()
    main()
