"""Per-layer profiles from XLA's cost analysis: full-size models against their published size and
cost, layers that add up to the whole model, no parameter allocated, the disk cache, the CLI.

The full-size profiles at batch 1 come from the per-user disk cache after the first run (keyed
by the model code, so an edit recomputes them); tests that must compute use their own folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from typer.testing import CliRunner

from simdist.cli import app
from simdist.errors import SimdistError
from simdist.layers import read_profile
from simdist.numerics import fullsize
from simdist.numerics import profile as profiling
from simdist.numerics.fullsize import FULLSIZE_MODELS, PUBLISHED
from simdist.numerics.models import make_model
from simdist.numerics.param_files import tree_paths
from simdist.numerics.profile import profile_model
from simdist.scenario.workload import ModelSpec

ROOT = Path(__file__).resolve().parents[1]

# The reference implementations' exact counts (torchvision's num_params; Hugging Face's
# bert-base-uncased and gpt2 checkpoints); PUBLISHED holds the rounded published figures.
REFERENCE_PARAMS = {
    "resnet50": 25_557_032,
    "resnet101": 44_549_160,
    "resnet152": 60_192_808,
    "resnet50_v1": 25_557_032,
    "resnet152_v1": 60_192_808,
    "vgg16": 138_357_544,
    "inception_v3": 23_834_568,  # 27,161,264 with the auxiliary classifier
    "bert_base": 109_482_240,
    "gpt2": 124_439_808,
    "gpt": 124_439_808,  # GPT-2's sizes by default
}


@pytest.mark.parametrize("name", FULLSIZE_MODELS)
def test_parameter_counts_match_the_published_ones(name):
    profile = profile_model(name, 1)
    published = PUBLISHED[name].params
    assert abs(profile.param_count / published - 1) < 0.01, (profile.param_count, published)
    assert profile.param_count == REFERENCE_PARAMS[name]
    # The profile's gradient bytes are the shapes jax.eval_shape gives for each layer's init.
    assert fullsize.param_count(fullsize.build(name)) == profile.param_count
    assert profile.param_nbytes == 4 * profile.param_count


@pytest.mark.parametrize("name", FULLSIZE_MODELS)
def test_forward_flops_within_ten_percent_of_published_multiply_adds(name):
    profile = profile_model(name, 1)
    expected = 2 * PUBLISHED[name].multiply_adds
    assert abs(profile.forward_flops / expected - 1) < 0.10, (profile.forward_flops, expected)
    assert profile.forward_flops_per_example == profile.forward_flops
    # A training step's backward costs about twice its forward (two products per weight).
    assert 1.9 < profile.backward_flops / profile.forward_flops < 2.1


def test_layers_add_up_to_the_whole_model_lowered_at_once():
    """ResNet-50's layers, lowered one by one, cost what the chained model costs in one
    program: forward, and forward + backward of a training step."""
    model = fullsize.build("resnet50")
    layers = fullsize.abstract_layers(model, 1)
    variables = [a.variables for a in layers]

    def forward(vs, x):
        for a, v in zip(layers, vs, strict=True):
            x = fullsize.apply_layer(a.layer.module, v, x)
        return x

    def step(ps, rest, x):
        def loss(qs):
            vs = [{**r, "params": q} for r, q in zip(rest, qs, strict=True)]
            return jnp.sum(forward(vs, x))

        return jax.value_and_grad(loss)(ps)

    params = [v["params"] for v in variables]
    rest = [{k: s for k, s in v.items() if k != "params"} for v in variables]
    fwd = jax.jit(forward).lower(variables, layers[0].x).cost_analysis()["flops"]
    train = jax.jit(step).lower(params, rest, layers[0].x).cost_analysis()["flops"]
    profile = profile_model("resnet50", 1)
    assert [x.name for x in profile.layers][:3] == ["conv1", "layer1.0", "layer1.1"]
    assert profile.forward_flops == pytest.approx(fwd, rel=1e-3)
    assert profile.flops == pytest.approx(train, rel=1e-3)


def test_layer_details():
    profile = profile_model("resnet50", 1)
    conv1, block, fc = profile.layers[0], profile.layers[1], profile.layers[-1]
    # The first layer computes no input gradient: its backward is its weight gradient.
    assert conv1.weight_grad_fraction == 1.0
    assert 0.4 < block.weight_grad_fraction < 0.6
    assert block.output_nbytes == 56 * 56 * 256 * 4
    assert fc.output_nbytes == 1000 * 4 and fc.param_nbytes == (2048 * 1000 + 1000) * 4
    assert fc.param_paths == ("params/fc/Dense_0/bias", "params/fc/Dense_0/kernel")
    gpt2 = profile_model("gpt2", 1)
    embeddings, head = gpt2.layers[0], gpt2.layers[-1]
    # GPT-2's output projection is the token embedding: counted (and reduced) once, there.
    assert embeddings.param_nbytes == (50257 + 1024) * 768 * 4
    assert head.param_paths == ("params/lm_head/ln_f/bias", "params/lm_head/ln_f/scale")
    assert head.forward_flops == pytest.approx(2 * 1024 * 768 * 50257, rel=0.01)
    assert head.backward_flops == pytest.approx(2 * head.forward_flops, rel=0.01)


def test_input_shape_and_outputs_override_the_defaults():
    small = profile_model("resnet50", 1, (112, 112, 3), n_outputs=10)
    full = profile_model("resnet50", 1)
    assert small.input_shape == (112, 112, 3)
    assert small.forward_flops == pytest.approx(full.forward_flops / 4, rel=0.02)
    assert full.param_count - small.param_count == 2048 * 990 + 990
    with pytest.raises(SimdistError, match="1 to 1024 positions"):
        profile_model("gpt2", 1, (2048,))
    with pytest.raises(SimdistError, match="takes images"):
        profile_model("vgg16", 1, (128,))
    with pytest.raises(SimdistError, match="unknown model 'resnet51'"):
        profile_model("resnet51", 1)


def test_profiling_allocates_no_parameters(tmp_path):
    """Profiling VGG-16 (553 MB of float32 parameters) without the cache grows the process by a
    small fraction of that; allocating the parameters for real is seen by the same measure."""
    # VmHWM (peak resident set) belongs to the process image, unlike ru_maxrss, which Linux
    # carries across exec from the forking parent (a pytest process that has lowered models).
    code = textwrap.dedent(
        """
        import json, sys
        import jax.numpy as jnp
        from simdist.numerics.profile import profile_model

        def status(key):
            with open("/proc/self/status") as f:
                line = next(x for x in f if x.startswith(key + ":"))
            return int(line.split()[1]) * 1024

        jnp.zeros(3).block_until_ready()  # the backend is up before the baseline
        base = status("VmRSS")
        if sys.argv[1] == "profile":
            nbytes = profile_model("vgg16", 1, use_cache=False).param_nbytes
        else:
            nbytes = jnp.zeros((138_357_544,), jnp.float32).block_until_ready().nbytes
        print(json.dumps({"growth": status("VmHWM") - base, "param_nbytes": nbytes}))
        """
    )

    def measure(mode: str) -> dict:
        done = subprocess.run(
            [sys.executable, "-c", code, mode],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "SIMDIST_CACHE_DIR": str(tmp_path)},
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.splitlines()[-1])

    profiled = measure("profile")
    assert profiled["param_nbytes"] == 138_357_544 * 4
    assert profiled["growth"] < profiled["param_nbytes"] / 10
    allocated = measure("allocate")
    assert allocated["growth"] > 0.9 * allocated["param_nbytes"]


def test_second_call_reads_the_disk_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(profiling.CACHE_ENV, str(tmp_path))
    spec = ModelSpec(name="mlp", hidden=[32])
    first = profile_model(spec, 4)
    files = list((tmp_path / "profiles").iterdir())
    assert len(files) == 1 and files[0].name.startswith("mlp-b4-")

    def no_lowering(*args, **kwargs):
        raise AssertionError("lowered again instead of reading the cache")

    monkeypatch.setattr(profiling, "_cost", no_lowering)
    assert profile_model(ModelSpec(name="mlp", hidden=[32]), 4) == first
    # The defaults given explicitly (the digits data set's shape and classes) are the same key.
    assert profile_model(spec, 4, (8, 8, 1), n_outputs=10) == first
    with pytest.raises(AssertionError, match="lowered again"):  # another batch: another key
        profile_model(spec, 8)
    with pytest.raises(AssertionError, match="lowered again"):  # another width: another key
        profile_model(ModelSpec(name="mlp", hidden=[64]), 4)
    # An unreadable entry is recomputed and replaced, not trusted.
    files[0].write_text("{ half a file")
    monkeypatch.undo()
    monkeypatch.setenv(profiling.CACHE_ENV, str(tmp_path))
    assert profile_model(spec, 4) == first
    assert json.loads(files[0].read_text())["model"] == "mlp"
    assert not [p for p in (tmp_path / "profiles").iterdir() if p.suffix == ".tmp"]


def test_cache_folder(monkeypatch, tmp_path):
    monkeypatch.delenv(profiling.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert profiling.cache_dir() == tmp_path / "simdist"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert profiling.cache_dir() == Path.home() / ".cache" / "simdist"
    monkeypatch.setenv(profiling.CACHE_ENV, str(tmp_path / "mine"))
    assert profiling.cache_dir() == tmp_path / "mine"


@pytest.mark.parametrize(
    "spec",
    [
        ModelSpec(name="softmax"),
        ModelSpec(name="mlp", hidden=[128, 64]),
        ModelSpec(name="cnn"),
        ModelSpec(name="resnet"),
    ],
    ids=lambda s: s.name,
)
def test_zoo_layers_add_up_exactly_to_the_model(spec):
    """A zoo model's layers are its top-level submodules; with what runs between them they
    add up to the whole model, and their parameters are the model's, path for path."""
    profile = profile_model(spec, 16, use_cache=False)
    model = make_model(spec, 10, (8, 8, 1))
    x = jax.ShapeDtypeStruct((16, 8, 8, 1), jnp.float32)
    variables = jax.eval_shape(model.init, jax.random.PRNGKey(0), x)
    train = {"train": True} if spec.name == "resnet" else {}

    def forward(v, a):
        return model.apply(v, a, mutable=True, **train)[0]

    def step(p, rest, a):  # the output and the gradient of a loss whose output gradient is 1
        y, pullback = jax.vjp(lambda q: forward({"params": q, **rest}, a), p)
        return y, pullback(jnp.ones_like(y))

    rest = {k: v for k, v in variables.items() if k != "params"}
    fwd = jax.jit(forward).lower(variables, x).cost_analysis()["flops"]
    both = jax.jit(step).lower(variables["params"], rest, x).cost_analysis()["flops"]
    assert profile.forward_flops == pytest.approx(fwd, rel=1e-9)
    assert profile.flops == pytest.approx(both, rel=1e-6)
    paths = [p for p in tree_paths(variables) if p.startswith("params/")]
    assert sorted(p for x in profile.layers for p in x.param_paths) == sorted(paths)
    leaves = jax.tree_util.tree_leaves(variables["params"])
    assert profile.param_nbytes == sum(a.size * 4 for a in leaves)
    assert profile.layers[-1].output_nbytes == 16 * 10 * 4


def test_zoo_layer_names():
    assert [x.name for x in profile_model("cnn", 2).layers] == [
        "Conv_0",
        "Conv_1",
        "Dense_0",
        "Dense_1",
    ]
    resnet = [x.name for x in profile_model("resnet", 2).layers]
    assert resnet[0] == "stem_conv" and resnet[-1] == "head"


def test_cli_profile_writes_csv_and_astra(tmp_path):
    runner = CliRunner()
    csv_path = tmp_path / "layers.csv"
    done = runner.invoke(
        app, ["profile", "cnn", "--batch-size", "8", "--out", str(csv_path)], terminal_width=160
    )
    assert done.exit_code == 0, done.output
    assert "Conv_1" in done.output and "total" in done.output
    assert read_profile(csv_path).layers == profile_model("cnn", 8).layers
    astra = tmp_path / "cnn.txt"
    done = runner.invoke(
        app,
        ["profile", str(csv_path), "--format", "astra", "--device", "v100", "--out", str(astra)],
    )
    assert done.exit_code == 0, done.output
    lines = astra.read_text().splitlines()
    assert lines[:2] == ["DATA", "4"] and lines[2].startswith("Conv_0\t-1\t")
    assert read_profile(astra).param_nbytes == read_profile(csv_path).param_nbytes
    bad = runner.invoke(app, ["profile", "gpt2", "--input-shape", "12x12"])
    assert bad.exit_code == 2 and "token sequences" in bad.output
    bad = runner.invoke(app, ["profile", "cnn", "--format", "json", "--out", "x"])
    assert bad.exit_code == 2 and "expected csv or astra" in bad.output


def test_cli_list_shows_parameters_and_gflops():
    done = CliRunner().invoke(app, ["list"], terminal_width=160)
    assert done.exit_code == 0, done.output
    row = next(line for line in done.output.splitlines() if "│ vgg16 " in line)
    assert "138,357,544" in row and "29.97" in row
    assert "full-size" in row and "224x224x3" in row


def test_cli_profile_refuses_an_out_that_cannot_be_written_before_profiling(tmp_path):
    """A folder as --out used to end in IsADirectoryError after the table was printed."""
    runner = CliRunner()
    bad = runner.invoke(app, ["profile", "cnn", "--out", str(tmp_path)])
    assert bad.exit_code == 2 and f"--out: {tmp_path} is a folder" in bad.output
    assert "total" not in bad.output  # refused before the work, not after the table
    bad = runner.invoke(app, ["profile", "cnn", "--out", str(tmp_path / "no" / "x.csv")])
    assert bad.exit_code == 2 and "does not exist" in bad.output
    assert list(tmp_path.iterdir()) == []
