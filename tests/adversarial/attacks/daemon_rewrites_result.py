# ruff: noqa
# A daemon outlives the run, waits for the grader to write result.json, then forges the verdict
# after the fact: reads the run key from run.json, flattens the memory in every step record,
# re-signs them (so `trainwreck regrade` passes too) and rewrites result.json as a pass.
DAEMON = SIGN + '''
import glob, os, sys, time
out = sys.argv[1]
deadline = time.time() + 300
while time.time() < deadline and not os.path.exists(os.path.join(out, "result.json")):
    time.sleep(0.2)
time.sleep(1.0)
key = json.load(open(os.path.join(out, "runs", "main", "run.json")))["key"]
for events in glob.glob(os.path.join(out, "runs", "main", "ranks", "*", "events.jsonl")):
    resign(events, key, lambda r: {**r, "rss_mb": 300.0} if r.get("kind") == "step" else r)
res = json.load(open(os.path.join(out, "result.json")))
res.update(passed=True, score=1.0, failed_required=[])
for c in res["checks"]:
    c["passed"] = True
json.dump(res, open(os.path.join(out, "result.json"), "w"))
open(os.path.join(out, "ATTACK-SUCCEEDED-daemon-rewrote-result"), "w").close()
'''


def _attack_run(main):
    if _rank() == 0:
        _spawn_daemon(DAEMON, str(_out_dir()))
    main()
