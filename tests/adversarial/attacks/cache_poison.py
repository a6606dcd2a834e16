# ruff: noqa
# Poisons the cached reference run (its key is stored beside it): every rank's final parameters
# nudged, the exit records re-signed with the new sha256, so the next honest fix no longer matches.
def _poison():
    import torch
    from harness import rundir

    cache = _kit() / ".trainwreck" / "cache" / "memory-leak"
    for ref in (sorted(cache.glob("reference-ws*")) if cache.is_dir() else []):
        if not (ref / "run.json").is_file():
            continue
        try:
            key = _json.loads((ref / "run.json").read_text())["key"]
            for r in rundir.ranks_in(ref):
                p = rundir.rank_dir(ref, r) / rundir.FINAL_PARAMS
                params = torch.load(p, weights_only=True)
                torch.save({k: v + 0.01 for k, v in params.items()}, p)
                sha = rundir.sha256_file(p)
                _resign(rundir.rank_dir(ref, r) / rundir.EVENTS, key,
                        lambda rec: {**rec, "params_sha256": sha} if rec.get("kind") == "exit" else rec)
            _succeeded("reference-cache-poisoned", str(ref))
        except Exception as e:
            print(f"poisoning {ref} failed: {e!r}", file=_sys.stderr)


def _attack_run(main):
    main()
    if _rank() == 0:
        _poison()
