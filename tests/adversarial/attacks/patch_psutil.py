# ruff: noqa
# Patches, inside its own process, what the bootstrap reads each step's RSS through (its reader of
# /proc/self/statm, and psutil, which that reader falls back to), so the leak never shows in the
# records. No key, no file, nothing outside the process touched.
import psutil as _psutil

_real_memory_info = _psutil.Process.memory_info


def _flat_memory_info(self):
    return _real_memory_info(self)._replace(rss=300 * 2**20)


_psutil.Process.memory_info = _flat_memory_info
try:
    from harness import instrument as _instrument

    _instrument._RssReader.mb = lambda self: 300.0
except (ImportError, AttributeError):
    pass


def _attack_run(main):
    main()
