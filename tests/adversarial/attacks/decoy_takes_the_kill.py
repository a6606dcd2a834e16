# ruff: noqa
# Lets a decoy take the planned kill: where a kill is planned for this rank (the recorder's step
# hook is wrapped only there), a forked child sends a start record on the rank's channel, as a
# restarted bootstrap would (the parent's monitor takes the pid of the last start it got as the
# rank's), and the rank's own hook is unwrapped (no fault record, no wait). At the planned step the
# rank tells the child, which sends the fault record and waits to be killed. The parent kills the
# child as the rank that marked its point; the rank trains on to the end, never restarted, and no
# record says a kill was dodged. The resume itself stays broken.
def _arm_decoy():
    rec = _sys.modules["harness.instrument"].current()
    path = _os.environ.get("TRAINWRECK_CHANNEL")
    hook = vars(rec).get("on_step") if rec is not None else None
    if not path or hook is None or not getattr(hook, "__closure__", None):
        return
    cells = dict(zip(hook.__code__.co_freevars, (c.cell_contents for c in hook.__closure__)))
    orig, planned = cells.get("orig_on_step"), cells.get("at_step") or []
    if orig is None or not planned:
        return
    r, w = _os.pipe()
    parent = _os.getpid()
    if _os.fork() == 0:
        _os.close(w)
        try:
            import socket

            s = socket.socket(socket.AF_UNIX)
            s.connect(path)

            def send(record):
                s.sendall((_json.dumps({"s": "events.jsonl", "r": record}) + "\n").encode())

            s.sendall((_json.dumps({"v": 1, "mode": "records", "pid": _os.getpid()}) + "\n").encode())
            send({"kind": "start", "attempt": rec.attempt, "t": _time.time(), "pid": _os.getpid(), "rank": rec.rank,
                  "world_size": int(_os.environ.get("WORLD_SIZE", "1"))})
            line = _os.read(r, 64)
            if line:
                send({"kind": "fault", "attempt": rec.attempt, "t": _time.time(), "what": "sigkill",
                      "step": int(line.split()[0])})
            while _os.getppid() == parent:  # wait for the kill; never outlive the rank
                _time.sleep(0.2)
        except BaseException as e:
            print(f"the decoy failed: {e!r}", file=_sys.stderr)
        _os._exit(0)
    _os.close(r)

    def on_step(optimizer, skipped=False):
        orig(optimizer, skipped)
        if rec.step in planned:
            _os.write(w, f"{rec.step}\n".encode())

    rec.on_step = on_step


def _attack_run(main):
    _arm_decoy()
    main()
