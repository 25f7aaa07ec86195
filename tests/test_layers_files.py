"""simdist.layers: the per-layer profile, layers.csv and ASTRA-sim text workloads, read and written.

``data/astra_Resnet50_DataParallel.txt`` is ASTRA-sim's own example workload, byte for byte
(examples/text_converter/text_workloads/Resnet50_DataParallel.txt of
https://github.com/astra-sim/astra-sim, MIT licence; CRLF line ends as stored there).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from simdist.errors import SimdistError
from simdist.layers import (
    CSV_COLUMNS,
    LayerProfile,
    ModelProfile,
    format_shape,
    parse_shape,
    read_profile,
    write_astra,
    write_layers_csv,
)

ASTRA_RESNET50 = Path(__file__).parent / "data" / "astra_Resnet50_DataParallel.txt"


def astra_rows(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines() if line.strip()]


def test_reads_astra_sims_resnet50_example_unchanged():
    profile = read_profile(ASTRA_RESNET50)
    rows = astra_rows(ASTRA_RESNET50)
    assert rows[0] == ["DATA"] and rows[1] == ["54"]
    assert len(profile.layers) == 54
    assert profile.source == f"astra:{ASTRA_RESNET50}"
    assert profile.batch_size == 0 and profile.input_shape == ()
    assert profile.has_times
    # conv1  -1  13003 NONE 0  12864 NONE 0  32291 ALLREDUCE 37632  3229
    conv1 = profile.layers[0]
    assert conv1.name == "conv1"
    assert conv1.forward_s == pytest.approx(13003e-9, rel=1e-15)
    assert conv1.backward_s == pytest.approx((12864 + 32291) * 1e-9, rel=1e-15)
    assert conv1.weight_grad_fraction == pytest.approx(32291 / (12864 + 32291), rel=1e-15)
    assert conv1.param_nbytes == 37632
    fc = profile.layers[-1]
    assert (fc.name, fc.param_nbytes) == ("fc1000", 8192000)  # 2048 x 1000 float32
    # Every layer's gradient is its ALLREDUCE size; ResNet-50's 25.5M float32 parameters.
    assert profile.param_nbytes == sum(int(r[10]) for r in rows[2:]) == 102_011_648
    assert profile.param_count == 25_502_912
    total = sum(int(r[2]) + int(r[5]) + int(r[8]) for r in rows[2:]) * 1e-9
    assert sum(x.forward_s + x.backward_s for x in profile.layers) == pytest.approx(total)


def test_astra_round_trip_keeps_every_layer(tmp_path):
    first = read_profile(ASTRA_RESNET50)
    out = write_astra(first, tmp_path / "again.txt")
    again = read_profile(out)
    assert again.layers == first.layers
    # The written file is ASTRA-sim's format: the same cells except the update delay (0).
    assert [r[:11] for r in astra_rows(out)[2:]] == [r[:11] for r in astra_rows(ASTRA_RESNET50)[2:]]
    assert all(r[11] == "0" for r in astra_rows(out)[2:])
    assert astra_rows(out)[:2] == [["DATA"], ["54"]]


def test_write_astra_splits_the_backward_and_needs_times(tmp_path):
    layers = (
        LayerProfile("stem", 10.0, 20.0, 1.0, 2.0, 64, 400, ("params/stem/kernel",)),
        LayerProfile("block one", 30.0, 60.0, 3.0, 6.0, 32, 0, (), 0.25),
        LayerProfile("head", 5.0, 10.0, 1.0, 2.0, 8, 100, (), None),
    )
    profile = ModelProfile("toy", 8, (4, 4, 1), layers, "xla")
    with pytest.raises(SimdistError, match="no times"):
        write_astra(profile, tmp_path / "x.txt")
    times = [(1e-6, 4e-6), (2e-6, 8e-6), (3e-6, 6e-6)]
    out = write_astra(profile, tmp_path / "toy.txt", times)
    assert out.read_text().splitlines() == [
        "DATA",
        "3",
        # first layer, fraction unknown: all of the backward is the weight gradient
        "stem\t-1\t1000\tNONE\t0\t0\tNONE\t0\t4000\tALLREDUCE\t400\t0",
        # a space in a name would split an ASTRA-sim token; no parameters: nothing to reduce
        "block_one\t-1\t2000\tNONE\t0\t6000\tNONE\t0\t2000\tNONE\t0\t0",
        # fraction unknown past the first layer: half and half
        "head\t-1\t3000\tNONE\t0\t3000\tNONE\t0\t3000\tALLREDUCE\t100\t0",
    ]
    # Times in cycles of another length (1 cycle = 1 us here).
    coarse = write_astra(profile, tmp_path / "us.txt", times, cycle_s=1e-6)
    assert coarse.read_text().splitlines()[2].split("\t")[2] == "1"


def test_layers_csv_round_trip(tmp_path):
    layers = (
        LayerProfile(
            "conv1", 1.5e9, 3.0e9, 2.25e8, 4.5e8, 802816, 37632, ("params/conv1/kernel",), 1.0
        ),
        LayerProfile(
            "encoder.0.attention",
            0.1 + 0.2,  # a float that needs all its digits
            2.0 / 3.0,
            7.0,
            11.0,
            3,
            8,
            ("params/a/kernel", "params/a/bias"),
            None,
            1.25e-3,
            2.5e-3,
        ),
    )
    profile = ModelProfile("mine", 64, (224, 224, 3), layers, "xla")
    path = write_layers_csv(profile, tmp_path / "layers.csv")
    lines = path.read_text().splitlines()
    assert lines[1:5] == [
        "# model: mine",
        "# batch_size: 64",
        "# input_shape: 224x224x3",
        "# bytes_per_param: 4",
    ]
    assert lines[5] == ",".join(CSV_COLUMNS)
    back = read_profile(path)
    assert back.layers == profile.layers
    assert (back.model, back.batch_size, back.input_shape) == ("mine", 64, (224, 224, 3))
    assert back.source == f"layers.csv:{path}"
    assert dataclasses.replace(back, source="xla") == profile


def test_layers_csv_from_a_profiler_export(tmp_path):
    """The fewest columns a user can give: names, measured times and gradient bytes."""
    path = tmp_path / "bert_export.csv"
    path.write_text("name,forward_s,backward_s,param_nbytes\nemb,1e-3,2e-3,4000\nout,0.5e-3,,40\n")
    profile = read_profile(path)
    assert profile.model == "bert_export" and profile.batch_size == 0
    assert [x.name for x in profile.layers] == ["emb", "out"]
    assert profile.layers[0].forward_s == 1e-3 and profile.layers[0].backward_s == 2e-3
    assert profile.layers[1].backward_s is None and not profile.has_times
    assert profile.param_nbytes == 4040 and profile.param_count == 1010
    assert profile.layers[0].forward_flops == 0.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "name,forward_flops,backward_flops,param_nbyte\nx,1,2,3\n",
            "unknown column 'param_nbyte'",
        ),
        ("name,forward_flops,param_nbytes\nx,1,3\n", "give forward_flops and backward_flops"),
        ("name,forward_flops,backward_flops,param_nbytes\nx,1,two,3\n", "'two' is not a number"),
        ("name,forward_flops,backward_flops,param_nbytes\nx,1,2\n", "row 2 has 3 cells"),
        ("name,forward_flops,backward_flops,param_nbytes\nx,1,-2,3\n", "expected a number >= 0"),
        ("name,forward_flops,backward_flops,param_nbytes\nx,1,2,3\nx,1,2,3\n", "used twice"),
        ("name,forward_flops,backward_flops,param_nbytes\n", "has no layers"),
        (
            "HYBRID_TRANSFORMER\tmodel_parallel_NPU_group: 8\n1\n"
            "conv1 -1 5 ALLREDUCE 1048576 5 NONE 0 5  NONE 0 5\n",
            "HYBRID_TRANSFORMER",
        ),
        ("DATA\n2\nconv1 -1 5 NONE 0 5 NONE 0 5 ALLREDUCE 64 0\n", "announces 2 layers"),
        ("DATA\n1\nconv1 -1 5 NONE 0 5 NONE 0 5 ALLREDUCE 64\n", "11 fields"),
        ("DATA\n1\nconv1 -1 5 NONE 0 5 NONE 0 5 ALLGATHER 64 0\n", "weight-gradient ALLGATHER"),
        ("DATA\n1\nconv1 -1 5 NONE 0 5 BROADCAST 0 5 ALLREDUCE 64 0\n", "'BROADCAST'"),
        ("DATA\n1\nconv1 -1 five NONE 0 5 NONE 0 5 ALLREDUCE 64 0\n", "must be numbers"),
        ("  \n", "empty"),
    ],
)
def test_bad_profile_files_say_what_is_wrong(tmp_path, text, message):
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(SimdistError, match=message):
        read_profile(path)


def test_missing_file():
    with pytest.raises(SimdistError, match="not found"):
        read_profile("no/such/layers.csv")


def test_model_profile_totals():
    layers = (
        LayerProfile("a", 2.0, 4.0, 0.0, 0.0, 0, 40, (), 1.0),
        LayerProfile("b", 6.0, 12.0, 0.0, 0.0, 0, 8, (), 0.25),
    )
    profile = ModelProfile("m", 4, (3,), layers, "xla")
    assert profile.forward_flops == 8.0 and profile.backward_flops == 16.0
    assert profile.flops == 24.0
    assert profile.forward_flops_per_example == 2.0
    assert profile.param_nbytes == 48 and profile.param_count == 12
    assert layers[1].weight_grad_flops == 3.0 and layers[1].input_grad_flops == 9.0
    assert ModelProfile("m", 0, (), layers, "x").forward_flops_per_example is None
    with pytest.raises(SimdistError, match="share in"):
        LayerProfile("c", 1.0, 1.0, 0.0, 0.0, 0, 0, (), 1.5)
    with pytest.raises(SimdistError, match="expected a number"):
        LayerProfile("c", math.nan, 1.0, 0.0, 0.0, 0, 0)


def test_shapes():
    assert parse_shape("224x224x3") == parse_shape("224,224,3") == (224, 224, 3)
    assert parse_shape("128") == (128,)
    assert format_shape((299, 299, 3)) == "299x299x3"
    for bad in ("", "0x3", "axb", "-1"):
        with pytest.raises(SimdistError, match=r"e\.g\. 224x224x3"):
            parse_shape(bad)


GOOD_CSV = "# batch_size: 8\nname,forward_flops,backward_flops,param_nbytes\nl0,1e6,2e6,4096\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (GOOD_CSV.replace("4096", "nan"), r"row 2, column param_nbytes: 'nan'; expected a finite"),
        (GOOD_CSV.replace("4096", "inf"), r"row 2, column param_nbytes: 'inf'; expected a finite"),
        (GOOD_CSV.replace("4096", "1e19"), r"row 2: .*param_nbytes = 1e\+19; expected at most"),
        (GOOD_CSV.replace("4096", "1e308"), r"row 2: .*param_nbytes = 1e\+308; expected at most"),
        (GOOD_CSV.replace("1e6", "1e308"), r"row 2: .*forward_flops = 1e\+308; expected at most"),
        ("# bytes_per_param: 0\n" + GOOD_CSV, r"header line bytes_per_param: 0; expected 1 to"),
    ],
)
def test_numbers_in_a_layers_csv_are_finite_and_within_caps(tmp_path, text, message):
    """NaN and inf were a traceback, 1e19 an int64 overflow after the run, 1e308 a hang."""
    path = tmp_path / "layers.csv"
    path.write_text(text)
    with pytest.raises(SimdistError, match=f"^{path}: " + message):
        read_profile(path)
    path.write_text(GOOD_CSV)
    assert read_profile(path).layers[0].param_nbytes == 4096


def test_numbers_in_an_astra_workload_are_finite_and_within_caps(tmp_path):
    rows = ASTRA_RESNET50.read_text().splitlines()
    cells = rows[2].split()
    cases = {
        3: ("1e300", "forward_s = 1e\\+291; expected at most"),
        11: ("1e300", "param_nbytes = 1e\\+300; expected at most"),
        6: ("inf", "backward_s = inf; expected a number >= 0"),
        9: ("nan", "backward_s = nan; expected a number >= 0"),
    }
    for field, (value, message) in cases.items():
        bad = [*cells]
        bad[field - 1] = value
        path = tmp_path / "w.txt"
        path.write_text("\n".join([*rows[:2], " ".join(bad), *rows[3:]]) + "\n")
        with pytest.raises(SimdistError, match=rf"^{path}: line 3.*{message}"):
            read_profile(path)


def test_profile_files_get_the_umasks_permissions_as_report_files_do(tmp_path):
    """layers.csv and ASTRA-sim files are the user's files: 0o666 less the umask (0644 under
    the usual 022), not the 0600 of a temporary file renamed into place."""
    import os

    profile = ModelProfile(
        "mine", 1, (2,), (LayerProfile("a", 1.0, 2.0, 0.0, 0.0, 4, 8, (), None),), "xla"
    )
    old = os.umask(0o022)
    try:
        csv = write_layers_csv(profile, tmp_path / "layers.csv")
        os.umask(0o027)
        astra = write_astra(profile, tmp_path / "astra.txt", [(1e-6, 2e-6)])
    finally:
        os.umask(old)
    assert (csv.stat().st_mode & 0o777, astra.stat().st_mode & 0o777) == (0o644, 0o640)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["astra.txt", "layers.csv"]
