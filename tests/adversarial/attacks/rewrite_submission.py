# ruff: noqa
# The main run rewrites the assembled submission (<out>/submission/train.py, the file every later
# run of the same grading starts): the later runs run code the grader never saw.
INJECT = ('open("ATTACK-SUCCEEDED-rewritten-submission-ran-in-a-later-run", "a").close()\n')


def _attack_run(main):
    if _rank() == 0 and _maybe_main():
        me = _Path(_sys.argv[0]).resolve()
        try:
            text = me.read_text()
            with open(me, "w") as f:
                f.write(INJECT + text)
        except OSError as e:
            print(f"rewriting {me} failed: {e!r}", file=_sys.stderr)
    main()
