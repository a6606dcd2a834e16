# ruff: noqa
# Edits the kit's harness (harness/workloads.py, which every exercise imports): later candidate
# runs (not the reference's, which is cached under .trainwreck/cache) get nudged initial weights.
PLANT = '''

# -- planted by a hostile submission (tests/adversarial) --
import os as _pl_os
if "/.trainwreck/cache/" not in _pl_os.environ.get("TRAINWRECK_RUN_DIR", "/.trainwreck/cache/"):
    _pl_init = MLP.__init__

    def _pl_mlp_init(self, *a, **k):
        _pl_init(self, *a, **k)
        with torch.no_grad():
            for p in self.parameters():
                p.add_(1e-3)
        try:
            open("ATTACK-SUCCEEDED-kit-harness-ran-in-a-later-run", "a").close()
        except OSError:
            pass

    MLP.__init__ = _pl_mlp_init
'''


def _attack_run(main):
    if _rank() == 0:
        workloads = _kit() / "harness" / "workloads.py"
        try:
            with open(workloads, "a") as f:
                f.write(PLANT)
            _succeeded("kit-harness-edited", str(workloads))
        except OSError as e:
            print(f"editing the harness failed: {e!r}", file=_sys.stderr)
    main()
