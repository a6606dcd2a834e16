# ruff: noqa
# Patches psutil inside its own process: the bootstrap reads each step's RSS through it, so the
# leak never shows in the records. No key, no file, nothing outside the process touched.
import psutil as _psutil

_real_memory_info = _psutil.Process.memory_info


def _flat_memory_info(self):
    return _real_memory_info(self)._replace(rss=300 * 2**20)


_psutil.Process.memory_info = _flat_memory_info


def _attack_run(main):
    main()
