"""A fuzz of profile files: mutated layers.csv and ASTRA-sim workloads end in a clear error.

Every mutation of a valid file (truncation, random bytes, odd numbers, columns added
or dropped, wrong layer counts, empty or binary files) either reads as a profile or
raises :class:`SimdistError` with a message naming the file; no other exception escapes
``read_profile``.
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simdist.errors import SimdistError
from simdist.layers import layers_csv_text, read_profile

ASTRA = (Path(__file__).parent / "data" / "astra_Resnet50_DataParallel.txt").read_text()
CSV = layers_csv_text(
    read_profile(Path(__file__).parent / "data" / "astra_Resnet50_DataParallel.txt")
)
ODD_NUMBERS = [
    "nan",
    "NaN",
    "inf",
    "-inf",
    "1e308",
    "1e19",
    "-1",
    "-0",
    "0",
    "1e-320",
    "",
    "x",
    "9" * 400,
]


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A valid CSV or ASTRA-sim text with one to three mutations applied."""
    text = draw(st.sampled_from([ASTRA, CSV]))
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(
            st.sampled_from(
                ["truncate", "bytes", "number", "column", "drop_line", "dup_line", "count"]
            )
        )
        lines = _lines(text)
        if kind == "truncate":
            text = text[: draw(st.integers(0, len(text)))]
        elif kind == "bytes" and text:
            at = draw(st.integers(0, len(text)))
            text = text[:at] + draw(st.text(max_size=8)) + text[at:]
        elif kind == "number" and lines:
            i = draw(st.integers(0, len(lines) - 1))
            sep = "\t" if "\t" in lines[i] else ","
            cells = lines[i].rstrip("\n").split(sep)
            j = draw(st.integers(0, len(cells) - 1))
            cells[j] = draw(st.sampled_from(ODD_NUMBERS))
            lines[i] = sep.join(cells) + "\n"
            text = "".join(lines)
        elif kind == "column" and lines:
            i = draw(st.integers(0, len(lines) - 1))
            sep = "\t" if "\t" in lines[i] else ","
            cells = lines[i].rstrip("\n").split(sep)
            if draw(st.booleans()) and len(cells) > 1:
                del cells[draw(st.integers(0, len(cells) - 1))]
            else:
                cells.append(draw(st.sampled_from(ODD_NUMBERS)))
            lines[i] = sep.join(cells) + "\n"
            text = "".join(lines)
        elif kind == "drop_line" and lines:
            del lines[draw(st.integers(0, len(lines) - 1))]
            text = "".join(lines)
        elif kind == "dup_line" and lines:
            i = draw(st.integers(0, len(lines) - 1))
            lines.insert(i, lines[i])
            text = "".join(lines)
        elif kind == "count" and len(lines) > 1 and text is not CSV:
            lines[1] = draw(st.sampled_from(["0", "-3", "1", "55", "53", "1e9", "nan", "x"])) + "\n"
            text = "".join(lines)
    data = text.encode("utf-8", "surrogatepass")
    if draw(st.integers(0, 9)) == 0:
        data = draw(st.binary(max_size=64))
    return data


@settings(
    max_examples=int(os.environ.get("SIMDIST_FUZZ_EXAMPLES", "200")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(mutated())
def test_mutated_profiles_raise_only_clear_errors(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "profile.txt"
        path.write_bytes(data)
        try:
            profile = read_profile(path)
        except SimdistError as error:
            assert str(error), "an error without a message"
            return
        assert profile.layers, "a profile read without layers"
        for layer in profile.layers:
            numbers = [layer.forward_flops, layer.backward_flops, layer.param_nbytes]
            assert all(math.isfinite(v) and v >= 0 for v in numbers), layer
