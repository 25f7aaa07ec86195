"""Human-friendly quantities ("10Gbit/s", "50us", "4MiB", "15.7TFLOP/s") to SI base units.

Scenarios are written by people, who think in Gbit/s and microseconds; the simulator
computes in bytes/s, seconds, bytes and FLOP/s. Parsing happens once, at load time, so
every other module sees plain floats. Plain numbers (or numeric strings such as "1e9")
are already in the base unit. The ``format_*`` helpers go the other way for reports.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from fractions import Fraction

__all__ = [
    "UnitError",
    "format_bandwidth",
    "format_duration",
    "format_flops",
    "format_number",
    "format_size",
    "parse_bandwidth",
    "parse_duration",
    "parse_flops",
    "parse_size",
]


class UnitError(ValueError):
    """A quantity that could not be read; the message lists the accepted forms with an example."""


_F = Fraction
_DECIMAL = {
    "": _F(1),
    "k": _F(10**3),
    "K": _F(10**3),
    "M": _F(10**6),
    "G": _F(10**9),
    "T": _F(10**12),
    "P": _F(10**15),
}
_BINARY = {"Ki": _F(2**10), "Mi": _F(2**20), "Gi": _F(2**30), "Ti": _F(2**40), "Pi": _F(2**50)}


def _prefixed(bases: dict[str, Fraction], prefixes: dict[str, Fraction]) -> dict[str, Fraction]:
    return {p + b: pf * bf for p, pf in prefixes.items() for b, bf in bases.items()}


_BANDWIDTH_UNITS: dict[str, Fraction] = {
    **_prefixed({"bit/s": _F(1, 8), "b/s": _F(1, 8), "bps": _F(1, 8)}, _DECIMAL),
    **_prefixed({"bit/s": _F(1, 8)}, _BINARY),
    **_prefixed({"B/s": _F(1), "Bps": _F(1)}, _DECIMAL),
    **_prefixed({"B/s": _F(1)}, _BINARY),
}
_SIZE_UNITS: dict[str, Fraction] = {
    **_prefixed({"B": _F(1)}, _DECIMAL),
    **_prefixed({"B": _F(1)}, _BINARY),
    "bytes": _F(1),
}
_DURATION_UNITS: dict[str, Fraction] = {
    "ns": _F(1, 10**9),
    "us": _F(1, 10**6),
    "µs": _F(1, 10**6),  # MICRO SIGN
    "μs": _F(1, 10**6),  # GREEK SMALL LETTER MU
    "ms": _F(1, 10**3),
    "s": _F(1),
    "sec": _F(1),
    "min": _F(60),
    "h": _F(3600),
    "day": _F(86400),
    "days": _F(86400),
}
_FLOPS_UNITS: dict[str, Fraction] = _prefixed(
    {"FLOP/s": _F(1), "FLOPS": _F(1), "flop/s": _F(1), "flops": _F(1)}, _DECIMAL
)

_QUANTITY = re.compile(
    r"^\s*(?P<num>[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*(?P<unit>[^\s\d].*?)?\s*$"
)


def _parse(value: object, units: dict[str, Fraction], expected: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise UnitError(f"got {value!r}; expected {expected}")
    if isinstance(value, str):
        match = _QUANTITY.match(value)
        if match is None:
            raise UnitError(f"got {value!r}; expected {expected}")
        unit = match["unit"] or ""
        if unit and unit not in units:
            raise UnitError(f"got {value!r}: unknown unit {unit!r}; expected {expected}")
        factor = units[unit] if unit else Fraction(1)
        number = float(match["num"])
        if math.isfinite(number) and number != 0:
            try:
                number = float(Fraction(match["num"]) * factor)  # one rounding: 50us == 5e-05
            except OverflowError:
                number = math.inf
    else:
        number = float(value)
    if math.isnan(number) or math.isinf(number):
        raise UnitError(f"got {value!r}: not a finite number; expected {expected}")
    if number < 0:
        raise UnitError(f"got {value!r}: must not be negative; expected {expected}")
    return number


_BANDWIDTH_EXPECTED = (
    "a bandwidth such as '10Gbit/s', '1.25GB/s' or a plain number of bytes/s "
    "(units: bit/s, Kbit/s, Mbit/s, Gbit/s, Tbit/s, Gbps, B/s, KB/s, MB/s, GB/s, TB/s, "
    "KiB/s, MiB/s, GiB/s, TiB/s)"
)
_DURATION_EXPECTED = (
    "a duration such as '50us', '2ms', '1.5s' or a plain number of seconds "
    "(units: ns, us, µs, ms, s, min, h, days)"
)
_SIZE_EXPECTED = (
    "a size such as '4MiB', '1GB', '512KB' or a plain number of bytes "
    "(units: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"
)
_FLOPS_EXPECTED = (
    "a compute rate such as '15.7TFLOP/s', '100GFLOPS' or a plain number of FLOP/s "
    "(units: FLOP/s, KFLOP/s, MFLOP/s, GFLOP/s, TFLOP/s, PFLOP/s, or FLOPS forms)"
)


def parse_bandwidth(value: object) -> float:
    """Bytes per second from e.g. ``"10Gbit/s"`` (1.25e9), ``"1.25GB/s"`` or ``1.25e9``."""
    return _parse(value, _BANDWIDTH_UNITS, _BANDWIDTH_EXPECTED)


def parse_duration(value: object) -> float:
    """Seconds from e.g. ``"50us"`` (5e-5), ``"2ms"``, ``"1.5s"``, ``"2min"`` or ``0.002``."""
    return _parse(value, _DURATION_UNITS, _DURATION_EXPECTED)


def parse_size(value: object) -> float:
    """Bytes from e.g. ``"4MiB"`` (4194304), ``"1GB"`` (1e9) or ``512``."""
    return _parse(value, _SIZE_UNITS, _SIZE_EXPECTED)


def parse_flops(value: object) -> float:
    """FLOP/s from e.g. ``"15.7TFLOP/s"``, ``"100GFLOPS"`` or ``1e12``."""
    return _parse(value, _FLOPS_UNITS, _FLOPS_EXPECTED)


def _scaled(value: float, steps: list[tuple[float, str]], fmt: Callable[[float], str]) -> str:
    """Format ``value`` with the largest unit in ``steps`` (ascending) not exceeding it."""
    factor, unit = steps[0]
    for f, u in steps:
        if abs(value) >= f:
            factor, unit = f, u
    return f"{fmt(value / factor)} {unit}"


def _sig3(x: float) -> str:
    return f"{x:.3g}"


#: What a report shows for a figure that was not measured (``None``).
MISSING = "—"


def format_number(value: float | None, fmt: str = "{:.4g}") -> str:
    """``value`` through the format string ``fmt``, or ``"—"`` when it is None (not measured).

    Only None is missing: a NaN is a value (a diverged loss prints ``nan``), so
    tables that mark missing cells with NaN convert them to None first.
    """
    return MISSING if value is None else fmt.format(value)


def format_bandwidth(bytes_per_s: float) -> str:
    """Readable bandwidth in decimal units, e.g. 1.25e9 -> ``"1.25 GB/s"``."""
    steps = [(1.0, "B/s"), (1e3, "KB/s"), (1e6, "MB/s"), (1e9, "GB/s"), (1e12, "TB/s")]
    return _scaled(bytes_per_s, steps, _sig3)


def format_duration(seconds: float) -> str:
    """Readable duration, e.g. 5e-5 -> ``"50 µs"``, 1.5e-3 -> ``"1.5 ms"``, 90 -> ``"1.5 min"``."""
    if seconds == 0:
        return "0 s"
    steps = [(1e-9, "ns"), (1e-6, "µs"), (1e-3, "ms"), (1.0, "s"), (60.0, "min"), (3600.0, "h")]
    return _scaled(seconds, steps, _sig3)


def format_size(nbytes: float) -> str:
    """Readable size in binary units, e.g. 4194304 -> ``"4.0 MiB"``, 100 -> ``"100 B"``."""
    if abs(nbytes) < 1024:
        return f"{nbytes:g} B"
    steps = [(2.0**10, "KiB"), (2.0**20, "MiB"), (2.0**30, "GiB"), (2.0**40, "TiB")]
    return _scaled(nbytes, steps, lambda x: f"{x:.1f}")


def format_size_decimal(nbytes: float) -> str:
    """Readable size in decimal units, e.g. 1e9 -> ``"1 GB"``, 1.5e6 -> ``"1.5 MB"``: for sizes
    given in decimal units (``--size 1GB``), which binary units would show as 953.7 MiB."""
    steps = [(1.0, "B"), (1e3, "KB"), (1e6, "MB"), (1e9, "GB"), (1e12, "TB")]
    return _scaled(nbytes, steps, _sig3)


def format_flops(flops_per_s: float) -> str:
    """Readable compute rate, e.g. 1.57e13 -> ``"15.7 TFLOP/s"``."""
    steps = [
        (1.0, "FLOP/s"),
        (1e3, "KFLOP/s"),
        (1e6, "MFLOP/s"),
        (1e9, "GFLOP/s"),
        (1e12, "TFLOP/s"),
        (1e15, "PFLOP/s"),
    ]
    return _scaled(flops_per_s, steps, _sig3)
