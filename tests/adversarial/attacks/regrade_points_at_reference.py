# ruff: noqa
# A daemon waits for result.json and points its run dirs at the cached reference run (a passing,
# properly signed run): no key needed, and `trainwreck regrade` then judges the reference's run
# as the candidate's.
DAEMON = '''
import glob, json, os, sys, time
out, cache = sys.argv[1], sys.argv[2]
deadline = time.time() + 300
while time.time() < deadline and not os.path.exists(os.path.join(out, "result.json")):
    time.sleep(0.2)
time.sleep(1.0)
refs = sorted(d for d in glob.glob(os.path.join(cache, "reference-ws*")) if os.path.exists(os.path.join(d, "run.json")))
if refs:
    res = json.load(open(os.path.join(out, "result.json")))
    res["run_dirs"] = {name: refs[-1] for name in res["run_dirs"]}
    res.update(passed=True, score=1.0, failed_required=[])
    for c in res["checks"]:
        c["passed"] = True
    json.dump(res, open(os.path.join(out, "result.json"), "w"))
    open(os.path.join(out, "ATTACK-SUCCEEDED-result-points-at-the-reference"), "w").close()
'''


def _attack_run(main):
    if _rank() == 0:
        _spawn_daemon(DAEMON, str(_out_dir()), str(_kit() / ".trainwreck" / "cache" / "memory-leak"))
    main()
