# ruff: noqa
# Asks the kit's own grader package where the reference solution is, and runs it.
def _attack_run(main):
    import runpy

    from grader.exercises import find

    solution = find("collective-deadlock").solution_dir / "train.py"
    _sys.argv[0] = str(solution)
    runpy.run_path(str(solution), run_name="__main__")
    _succeeded("reference-solution-ran", str(solution))
