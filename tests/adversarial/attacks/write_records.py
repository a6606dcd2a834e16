# ruff: noqa
# Writes records itself: a flat-memory step series appended to its own events.jsonl (with a
# made-up mac), and, where a record channel exists, the same straight into its socket with a
# hand-made hello (plus a record aimed at another file by its name).
def _forged_steps():
    return [{"kind": "step", "attempt": 0, "step": 1000 + s, "t": _time.time(), "dt": 0.05,
             "rss_mb": 300.0} for s in range(192)]


def _into_files():
    from harness import rundir

    events = rundir.rank_dir(_run_dir(), _rank()) / rundir.EVENTS
    if not events.parent.is_dir():
        return
    try:
        with open(events, "a") as f:
            for rec in _forged_steps():
                f.write(_json.dumps({**rec, "mac": "0" * 32}) + "\n")
    except OSError as e:
        print(f"writing records failed: {e!r}", file=_sys.stderr)


def _into_channel():
    import socket

    path = _os.environ.get("TRAINWRECK_CHANNEL")
    if not path:
        return
    try:
        s = socket.socket(socket.AF_UNIX)
        s.connect(path)
        lines = [_json.dumps({"v": 1, "mode": "records"})]
        lines += [_json.dumps({"s": "events.jsonl", "r": rec}) for rec in _forged_steps()]
        lines.append(_json.dumps({"s": "../../run.json", "r": {"status": "ok"}}))
        s.sendall(("\n".join(lines) + "\n").encode())
        s.close()
    except OSError as e:
        print(f"writing to the channel failed: {e!r}", file=_sys.stderr)


def _attack_run(main):
    main()
    _into_files()
    _into_channel()
