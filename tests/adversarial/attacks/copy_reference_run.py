# ruff: noqa
# Does no training at all: copies the cached reference run's records (verified with the reference's
# key from its run.json, re-signed with this run's key from /proc/self/environ), its final
# parameters, its checkpoint and its metrics log into this run, then exits 0 before the bootstrap
# writes anything else. Where it finds neither key nor cache it plays it straight.
def _attack_run(main):
    from harness import rundir

    key = _key()
    cache = _kit() / ".trainwreck" / "cache" / "collective-deadlock"
    refs = sorted(d for d in cache.glob("reference-ws*") if (d / "run.json").is_file()) if cache.is_dir() else []
    if not key or not refs:
        return main()
    ref = refs[-1]
    ref_key = _json.loads((ref / "run.json").read_text())["key"]
    r = _rank()
    mine, theirs = rundir.rank_dir(_run_dir(), r), rundir.rank_dir(ref, r)
    for name in (rundir.EVENTS, rundir.COLLECTIVES, rundir.SAMPLES, rundir.SAVES):
        if not (theirs / name).is_file():
            continue
        with open(mine / name, "a") as f:
            for line in (theirs / name).read_text().splitlines():
                rec = rundir.verified(line, ref_key)
                if rec is not None and rec.get("kind") not in ("boot", "start"):
                    f.write(rundir.sign(rec, key) + "\n")
    import shutil

    shutil.copyfile(theirs / rundir.FINAL_PARAMS, mine / rundir.FINAL_PARAMS)
    if r == 0:
        _os.makedirs("out", exist_ok=True)
        for name in ("ckpt.pt", "metrics.jsonl"):
            shutil.copyfile(ref / "work" / "out" / name, _Path("out") / name)
    _succeeded("reference-run-copied", str(ref))
    _sys.stdout.flush()
    _sys.stderr.flush()
    _os._exit(0)
