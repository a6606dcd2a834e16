"""What a recorded log shows of the machine that recorded it: a neutral one.

An exercise's ``logs/`` and ``baseline.json`` come from ``trainwreck record`` on a kit author's
checkout; shipped as they were, tracebacks would name that checkout, its virtualenv and the
harness's own wrappers (around ``backward`` and the collectives), none of which a job outside the
kit prints. ``Neutral`` rewrites them as a container's job would print them: the exercise folder is
``/workspace``, site-packages ``/usr/local/lib/pythonX.Y/site-packages``, the interpreter's folder
``/usr/local/bin``, a frame of the harness is left out of a traceback (its ``File`` line and the
lines under it), and the launcher's failure banner names the script as ``torchrun train.py`` has it,
not the harness's bootstrap that ran it. Everything else is what the run printed, byte for byte.
"""

from __future__ import annotations

import re
import site
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WORKSPACE = "/workspace"
PY = f"python{sys.version_info.major}.{sys.version_info.minor}"
SITE = f"/usr/local/lib/{PY}/site-packages"
BIN = "/usr/local/bin"


@dataclass
class Neutral:
    exercise_dir: Path
    kit_root: Path
    run_dir: Path | None = None
    entry: str = "train.py"
    _pairs: list[tuple[str, str]] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        pairs: dict[str, str] = {}
        sites = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()}
        for s in sites:
            pairs[str(Path(s).resolve())] = SITE
            pairs[s] = SITE
        for b in {Path(sys.executable).parent, Path(sys.prefix) / "bin"}:
            pairs[str(b)] = BIN
        pairs[str(self.exercise_dir.resolve())] = WORKSPACE
        if self.run_dir is not None:
            pairs[str(self.run_dir)] = f"{WORKSPACE}/run"
        root = str(self.kit_root.resolve())
        for src, dst in list(pairs.items()):  # the launcher prints paths under its cwd relative to it
            if src.startswith(root + "/"):
                pairs[src[len(root) + 1:]] = dst
        # Longest first: site-packages inside the checkout before the checkout itself.
        self._pairs = sorted(pairs.items(), key=lambda kv: -len(kv[0]))
        self._harness = re.compile(r'^(\s*)File "' + re.escape(root) + r'/harness/[^"]+", line \d+')

    def path(self, s: str) -> str:
        for src, dst in self._pairs:
            if src and src != dst:
                s = re.sub(r"(?<![\w/.-])" + re.escape(src) + r"(?=[/\"':\s,;)\]}]|$)", dst, s)
        return s

    def text(self, s: str) -> str:
        """A log: the harness's frames left out of each traceback, then the paths made neutral."""
        out: list[str] = []
        skip_under: int | None = None
        for line in s.splitlines(keepends=True):
            if skip_under is not None:
                if line.strip() and len(line) - len(line.lstrip()) > skip_under:
                    continue  # the frame's source line and its ^^^ markers
                skip_under = None
            m = self._harness.match(line)
            if m:
                skip_under = len(m.group(1))
                continue
            if line.rstrip("\n") == "harness.bootstrap FAILED":
                line = f"{self.entry} FAILED\n"
            out.append(line)
        return self.path("".join(out))

    def value(self, v: Any) -> Any:
        """A JSON value (``baseline.json``): every string read as a log (a failure's error is a
        traceback); a list of frames loses the harness's."""
        if isinstance(v, str):
            return self.text(v)
        if isinstance(v, list):
            return [self.value(x) for x in v if not self._harness_site(x)]
        if isinstance(v, dict):
            return {k: self.value(x) for k, x in v.items()}
        return v

    def _harness_site(self, x: Any) -> bool:
        return isinstance(x, str) and x.startswith(str(self.kit_root.resolve()) + "/harness/")
