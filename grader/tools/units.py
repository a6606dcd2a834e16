"""Quantities with explicit units, for the capacity calculator and the quiz.

Sizes are bytes: decimal prefixes (kB, MB, GB, TB, PB: powers of 1000, as vendors quote HBM and
disks) and binary ones (KiB, MiB, GiB, TiB, PiB: powers of 1024, as most tools print memory) are
both accepted and never confused. A lower-case ``b`` means bits (``Gb``, ``Gbit``), as network links
are quoted: 400 Gb/s is 50 GB/s. A number without a unit is refused wherever a unit changes the
answer, because guessing one is exactly the mistake the quiz is there to catch.
"""

from __future__ import annotations

import math
import re

GB = 1e9
GiB = 2.0**30

_DECIMAL = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}
_TIME = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0, "min": 60.0, "h": 3600.0,
         "hr": 3600.0, "d": 86400.0, "day": 86400.0, "days": 86400.0, "week": 604800.0,
         "weeks": 604800.0}
_COUNT = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}
_NUMBER = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"


class UnitError(ValueError):
    """One line that names the value and shows a form that would be accepted."""


def _split(text: str, what: str, example: str) -> tuple[float, str]:
    m = re.fullmatch(_NUMBER + r"\s*(.*)", text.strip())
    if not m:
        raise UnitError(f"{text!r} is not a {what}; write it like {example}")
    value = float(m.group(1))
    if not math.isfinite(value):
        raise UnitError(f"{text!r} is not a finite number; write it like {example}")
    return value, m.group(2).strip()


def _size_factor(unit: str) -> float | None:
    """Bytes per unit for B, kB, MiB, Gb, Gbit, ...; None if ``unit`` is not a size."""
    m = re.fullmatch(r"([kKMGTP]i?)?(B|b|bit|bits|byte|bytes)", unit)
    if not m:
        return None
    prefix, base = m.group(1) or "", m.group(2)
    scale = _BINARY.get(prefix) if prefix.endswith("i") else _DECIMAL.get(prefix)
    if scale is None:
        return None
    return scale * (1.0 if base in ("B", "byte", "bytes") else 1.0 / 8.0)


def parse_size(text: str) -> float:
    """``'14GB'`` -> 14e9 bytes; ``'13.04 GiB'``; ``'400Gb'`` (bits) -> 50e9 bytes."""
    value, unit = _split(text, "size", "14GB, 13GiB or 64KiB")
    if not unit:
        raise UnitError(f"{text!r} has no unit; say GB (10^9 bytes) or GiB (2^30 bytes), e.g. {value:g}GB")
    factor = _size_factor(unit)
    if factor is None:
        raise UnitError(f"{text!r}: unknown size unit {unit!r}; use B, kB, MB, GB, TB, KiB, MiB, GiB, TiB, "
                        "or Gb/Gbit for bits")
    if value < 0:
        raise UnitError(f"{text!r}: a size cannot be negative")
    return value * factor


def parse_rate(text: str) -> float:
    """Bytes per second: ``'50GB/s'``, ``'400Gb/s'`` or ``'400Gbps'`` (bits), ``'1.5GiB/s'``."""
    value, unit = _split(text, "bandwidth", "50GB/s or 400Gbit/s")
    m = re.fullmatch(r"([kKMGTP]i?)bps", unit)
    if m:
        unit = m.group(1) + "bit/s"
    if not unit.endswith("/s"):
        raise UnitError(f"{text!r}: give a rate per second, e.g. {value:g}GB/s (bytes) or {value:g}Gbit/s (bits)")
    factor = _size_factor(unit[:-2])
    if factor is None:
        raise UnitError(f"{text!r}: unknown unit {unit!r}; use GB/s, GiB/s, MB/s, or Gbit/s (Gb/s, Gbps) for bits")
    if value <= 0:
        raise UnitError(f"{text!r}: a bandwidth must be positive")
    return value * factor


def parse_duration(text: str) -> float:
    """Seconds: ``'98s'``, ``'5min'``, ``'24h'``, ``'1.5d'``, ``'50us'``."""
    value, unit = _split(text, "duration", "90s, 5min or 24h")
    if unit not in _TIME:
        raise UnitError(f"{text!r}: give a time unit (us, ms, s, min, h, d), e.g. {value:g}s")
    if value < 0:
        raise UnitError(f"{text!r}: a duration cannot be negative")
    return value * _TIME[unit]


def parse_count(text: str) -> float:
    """A count such as a parameter count: ``'7e9'``, ``'7B'`` (billion), ``'350M'``, ``'1.5T'``."""
    value, unit = _split(text, "count", "7e9 or 7B")
    if unit not in _COUNT:
        raise UnitError(f"{text!r}: a count takes k, M, B (billion) or T (trillion), e.g. 7B or 7e9")
    if value <= 0:
        raise UnitError(f"{text!r}: must be positive")
    return value * _COUNT[unit]


def parse_fraction(text: str) -> float:
    """``'40%'`` -> 0.4; ``'0.4'`` -> 0.4."""
    value, unit = _split(text, "fraction", "40% or 0.4")
    if unit == "%":
        value /= 100.0
    elif unit:
        raise UnitError(f"{text!r}: give a fraction as 0.4 or 40%")
    if not 0 < value <= 1:
        raise UnitError(f"{text!r}: must be above 0 and at most 100%")
    return value


# Units the quiz answers in, grouped by what converts into what. A unit absent from every group is
# a plain label (GPUs, steps, USD): an answer may repeat it or leave it out, never swap it.
DIMENSIONS: dict[str, dict[str, float]] = {
    "size": {u: f for u in ("B", "kB", "KB", "MB", "GB", "TB", "PB", "KiB", "MiB", "GiB", "TiB", "PiB",
                            "bit", "Mbit", "Gbit", "Tbit", "Mb", "Gb", "Tb")
             if (f := _size_factor(u)) is not None},
    "rate": {u + "/s": f for u in ("B", "kB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB", "Mbit", "Gbit",
                                   "Tbit", "Mb", "Gb", "Tb")
             if (f := _size_factor(u)) is not None},
    "time": dict(_TIME),
    "fraction": {"%": 0.01, "fraction": 1.0},
}


def dimension_of(unit: str) -> str | None:
    return next((d for d, units in DIMENSIONS.items() if unit in units), None)


def convert(value: float, from_unit: str, to_unit: str) -> float:
    """``value`` in ``from_unit`` expressed in ``to_unit``; both must share a dimension."""
    if from_unit == to_unit:
        return value
    dim = dimension_of(to_unit)
    if dim is None or from_unit not in DIMENSIONS[dim]:
        raise UnitError(f"cannot express {from_unit or 'a bare number'} as {to_unit}")
    return value * DIMENSIONS[dim][from_unit] / DIMENSIONS[dim][to_unit]


def human_duration(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.3g} us"
    if seconds < 1:
        return f"{seconds * 1e3:.4g} ms"
    if seconds < 120:
        return f"{seconds:.4g} s"
    if seconds < 7200:
        return f"{seconds / 60:.4g} min"
    if seconds < 172800:
        return f"{seconds / 3600:.4g} h"
    return f"{seconds / 86400:.4g} days"
