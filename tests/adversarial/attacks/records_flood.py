# ruff: noqa
# Floods its record stream before training starts: about 300 MB of records through the harness's
# own channel where there is one (each record arrives signed, as the rank's), else 200 MB of
# short lines straight into its events.jsonl.
def _flood():
    if _os.environ.get("TRAINWRECK_CHANNEL"):  # 1 KB records: a channel signs about 10,000 a second
        from harness import channel

        w = channel.RecordWriter("events.jsonl")
        for i in range(300 * 2**10):
            w.write({"kind": "note", "attempt": 0, "i": i, "pad": "x" * 960})
        return
    line = {"kind": "note", "attempt": 0, "pad": "x" * 60}
    n = 200 * 2**20 // 100
    from harness import rundir

    events = rundir.rank_dir(_run_dir(), _rank()) / rundir.EVENTS
    if events.parent.is_dir():
        text = (_json.dumps(line) + "\n") * 10000
        with open(events, "a") as f:
            for _ in range(n // 10000):
                f.write(text)


def _attack_run(main):
    if _rank() == 0:
        _flood()
    main()
