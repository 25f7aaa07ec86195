"""The per-step costs a run measures once: compute per layer and the bytes that move.

The engine hands a strategy one :class:`~simdist.step_costs.Costs` and then only
keeps time. This module makes it: the clock model's layer profile (XLA's cost analysis
of a zoo model, or a profile file) priced by the roofline of each device class or
calibrated to a measured step, and the sizes of the parameters, the optimizer state and
an example, from the run's Workload or derived without allocating anything. Profiles,
data sets and abstract parameter shapes are kept per process
(:func:`simdist.memo.remember`), as sweeps and benchmarks cost the same model many times.
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simdist.hardware.cluster import Cluster
from simdist.hardware.fp8 import Fp8Gemms, fp8_gemms
from simdist.hardware.profiles import DEVICE_PROFILES, FP8_REST_PRECISION, DeviceProfile
from simdist.hardware.roofline import achieved_flops_per_s, calibrate, layer_times, step_time
from simdist.memo import remember
from simdist.scenario import Scenario
from simdist.step_costs import Costs, DeviceCosts, LayerCost

if TYPE_CHECKING:
    from simdist.layers import LayerProfile, ModelProfile
    from simdist.numerics.data import Dataset
    from simdist.numerics.executor import Workload
    from simdist.scenario.cluster import DeviceSpec
    from simdist.scenario.workload import ModelSpec

#: (path, shape, nbytes) of each parameter leaf, as :attr:`Costs.param_leaves` lists them.
Leaves = tuple[tuple[str, tuple[int, ...], int], ...]


def file_stamp(path: Path | None) -> list[Any] | None:
    """``path``, its size and modification time: a cache key part that changes with the file."""
    if path is None:
        return None
    stat = Path(path).stat()
    return [str(path), stat.st_size, stat.st_mtime_ns]


def full_size(model: ModelSpec | None) -> bool:
    """Whether ``model`` (a ModelSpec) is one of the zoo's full-size models (clock only)."""
    from simdist.catalog import FULLSIZE_MODELS

    return model is not None and model.name in FULLSIZE_MODELS


_profiles: OrderedDict[str, Any] = OrderedDict()


def scale_profile(profile: ModelProfile, batch_size: int) -> ModelProfile:
    """``profile`` for ``batch_size`` examples: FLOPs, bytes and given times scale linearly.

    A profile file is measured at one batch size; running it at another scales every
    per-batch cost by the ratio (parameters and their gradients do not change). Weights are
    read once per batch whatever its size, so bytes scale less than this says: profile at
    the batch you run for exact figures. A profile of unknown batch (``batch_size`` 0, as
    ASTRA-sim files) is one step as given.
    """
    from dataclasses import replace

    if profile.batch_size in (0, batch_size):
        return profile
    r = batch_size / profile.batch_size

    def scaled(layer: LayerProfile) -> LayerProfile:
        return replace(
            layer,
            forward_flops=layer.forward_flops * r,
            backward_flops=layer.backward_flops * r,
            forward_bytes=layer.forward_bytes * r,
            backward_bytes=layer.backward_bytes * r,
            output_nbytes=round(layer.output_nbytes * r),
            forward_s=None if layer.forward_s is None else layer.forward_s * r,
            backward_s=None if layer.backward_s is None else layer.backward_s * r,
            conv3x3_flops=layer.conv3x3_flops * r,
            conv3x3_nbytes=layer.conv3x3_nbytes * r,
            elementwise_forward_nbytes=layer.elementwise_forward_nbytes * r,
            elementwise_backward_nbytes=layer.elementwise_backward_nbytes * r,
        )

    return replace(profile, batch_size=batch_size, layers=tuple(scaled(x) for x in profile.layers))


def _dataset_shape(
    scenario: Scenario, workload: Workload | None
) -> tuple[tuple[int, ...] | None, int | None]:
    """(input shape, outputs) the trained data set gives a small zoo model; (None, None) else."""
    if workload is not None:
        return tuple(workload.dataset.input_shape), int(workload.dataset.n_outputs)
    data = _dataset(scenario)
    if data is None:
        return None, None
    return tuple(data.input_shape), int(data.n_outputs)


def clock_profile(scenario: Scenario, workload: Workload | None = None) -> ModelProfile:
    """The :class:`~simdist.layers.ModelProfile` the clock follows, for one replica's batch.

    ``workload.profile`` (a layers.csv or ASTRA-sim file) if given; else the zoo model
    ``workload.timing_model`` (a surrogate's clock) or ``workload.model``, costed layer by
    layer from XLA's cost analysis (:func:`simdist.numerics.profile.profile_model`). A
    full-size model or a timing model takes its own input shape and outputs; the trained
    model takes the data set's. ``workload.input_shape`` overrides the shape. Cached per
    process (and on disk, by ``profile_model``).
    """
    w = scenario.workload
    batch = int(w.batch_size)
    if w.profile is not None:

        def read() -> ModelProfile:
            from simdist.layers import read_profile

            return read_profile(w.profile)

        key = json.dumps(["file", file_stamp(w.profile)])
        return scale_profile(remember(_profiles, key, read), batch)
    spec = w.clock_model
    shape: tuple[int, ...] | None = None
    n_outputs: int | None = None
    if w.timing_model is None and not full_size(spec):
        shape, n_outputs = _dataset_shape(scenario, workload)
    if w.input_shape:
        shape = tuple(int(d) for d in w.input_shape)

    def lower() -> ModelProfile:
        from simdist.numerics.profile import profile_model

        return profile_model(spec, batch, input_shape=shape, n_outputs=n_outputs)

    key = json.dumps(["zoo", spec.model_dump(mode="json"), batch, shape, n_outputs])
    return remember(_profiles, key, lower)


_datasets: OrderedDict[str, Dataset] = OrderedDict()


def _dataset(scenario: Scenario) -> Dataset | None:
    """The named data set (for its sizes and shapes), or None when the scenario has none."""
    spec = scenario.workload.dataset
    if spec is None:
        return None

    def load() -> Dataset:
        from simdist.numerics.data import load_dataset

        return load_dataset(spec, scenario.seed)

    key = json.dumps([spec.model_dump(mode="json"), file_stamp(spec.path), scenario.seed])
    return remember(_datasets, key, load)


def abstract_leaves(scenario: Scenario, profile: ModelProfile) -> Leaves:
    """(path, shape, nbytes) of the clock model's parameters, without allocating them.

    A zoo model's come from ``jax.eval_shape`` of its init (a full-size model's layer by
    layer, named ``params/<layer>/...`` as its profile's ``param_paths``); a profile file's
    are one variable per layer that has parameters, named by the layer, as its
    ``param_paths`` are not sized one by one.
    """
    w = scenario.workload
    if w.profile is not None:
        per = max(1, int(profile.bytes_per_param))
        return tuple(
            (layer.name, (int(layer.param_nbytes) // per,), int(layer.param_nbytes))
            for layer in profile.layers
            if layer.param_nbytes > 0
        )
    spec = w.clock_model
    shape = tuple(profile.input_shape)
    n_outputs = None
    if w.timing_model is None and not full_size(spec):
        n_outputs = _dataset_shape(scenario, None)[1]
    key = json.dumps(["leaves", spec.model_dump(mode="json"), list(shape), n_outputs])
    return remember(_profiles, key, lambda: _param_shapes(spec, shape, n_outputs))


def _param_shapes(spec: ModelSpec, shape: tuple[int, ...], n_outputs: int | None) -> Leaves:
    """The parameters of zoo model ``spec`` on examples of ``shape``, as shapes only."""
    import jax
    import jax.numpy as jnp

    from simdist.numerics.param_files import tree_paths

    if full_size(spec):
        from simdist.numerics import fullsize

        model = fullsize.build(spec.name, shape, n_outputs, spec.gpt_sizes())
        trees = [(f"params/{a.layer.name}/", a.params) for a in fullsize.abstract_layers(model, 1)]
    else:
        from simdist.numerics.models import make_model

        module = make_model(spec, 10 if n_outputs is None else n_outputs, shape)
        x = jax.ShapeDtypeStruct((1, *shape), jnp.float32)
        variables = jax.eval_shape(module.init, jax.random.PRNGKey(0), x)
        trees = [("params/", variables.get("params", {}))]
    return tuple(
        (prefix + path, tuple(int(d) for d in leaf.shape), int(leaf.size * leaf.dtype.itemsize))
        for prefix, tree in trees
        for path, leaf in zip(tree_paths(tree), jax.tree_util.tree_leaves(tree), strict=True)
    )


def _opt_state_nbytes(scenario: Scenario, leaves: Leaves, total_steps: int) -> int:
    """Bytes of the optimizer's state for parameters of these (path, shape, nbytes) leaves."""
    import jax
    import numpy as np

    from simdist.numerics.optim import make_optimizer

    tree = {path: jax.ShapeDtypeStruct(shape, np.float32) for path, shape, _ in leaves}
    state = jax.eval_shape(make_optimizer(scenario.workload.optimizer, total_steps).init, tree)
    return sum(int(leaf.size * leaf.dtype.itemsize) for leaf in jax.tree_util.tree_leaves(state))


def measured_step_s(scenario: Scenario, device_spec: DeviceSpec | None = None) -> float | None:
    """One device's measured step time: ``cluster.device.compute_time``, or the per-replica
    batch / ``cluster.device.examples_per_s``; None when nothing was measured.

    ``device_spec``: a host's own device section instead of ``cluster.device``.
    """
    spec = scenario.cluster.device if device_spec is None else device_spec
    if spec.compute_time_s is not None:
        return float(spec.compute_time_s)
    if spec.examples_per_s is not None:
        return scenario.workload.batch_size / spec.examples_per_s
    return None


def step_seconds(
    scenario: Scenario,
    profile: ModelProfile,
    device: DeviceProfile,
    device_spec: DeviceSpec | None = None,
) -> list[tuple[float, float]]:
    """(forward_s, backward_s) per layer on ``device``: the roofline, or calibrated.

    A measured step (:func:`measured_step_s` of ``device_spec``, by default the cluster's
    device section) scales the roofline's times by one factor so that one device's step
    takes exactly that long.
    """
    times = layer_times(profile, device, device.precision, fp8_layers(scenario, profile, device))
    measured = measured_step_s(scenario, device_spec)
    return times if measured is None else calibrate(times, measured)


def fp8_layers(
    scenario: Scenario, profile: ModelProfile, device: DeviceProfile
) -> list[Fp8Gemms | None] | None:
    """Each layer's FP8 GEMMs (:mod:`simdist.hardware.fp8`) when ``device`` trains at ``fp8``
    and the clock model's layers are known by their shapes (a gpt: its attention, MLP and
    MoE layers' linear GEMMs); None else, and None for a layer without them."""
    from simdist.memory.accounting import model_tensors

    if device.precision != "fp8":
        return None
    tensors = {t.name: t.linear for t in model_tensors(scenario) or ()}
    examples = max(1, int(profile.batch_size))
    out: list[Fp8Gemms | None] = []
    for layer in profile.layers:
        g = tensors.get(layer.name)
        out.append(
            None if g is None else fp8_gemms(g.flops, g.inputs, g.outputs, g.weights, examples)
        )
    return out


def measure_costs(
    scenario: Scenario, workload: Workload | None, device: DeviceProfile | None = None
) -> Costs:
    """Per-replica compute time of one step, layer by layer, and the bytes that move.

    The clock model's layer profile (:func:`clock_profile`) priced by the roofline of the
    scenario's device at its precision (:mod:`simdist.hardware.roofline`), or calibrated to a
    measured step (:func:`step_seconds`); ``compute_s`` is their sum. Parameters,
    optimizer state and data set sizes come from the Workload when the run has one and
    trains the clock model; otherwise they are derived without allocating anything.

    A mixed cluster (hosts listed with different device profiles) prices the same
    per-replica batch on every device class (:attr:`Costs.per_profile`); ``compute_s`` and
    ``layers`` are then worker 0's. ``device`` prices every device as that profile.
    """
    w = scenario.workload
    profile = clock_profile(scenario, workload)
    if device is None:
        cluster = Cluster(scenario.cluster)
        classes = [(label, p, cluster.device_specs[label]) for label, p in cluster.profiles.items()]
    else:
        classes = [(device.name, device, None)]
    layer_paths = _layer_paths(scenario, profile)
    wire = wire_element_nbytes(scenario, classes[0][1].precision)
    element, grad = wire
    per_profile = tuple(
        (label, _device_costs(scenario, profile, p, spec, layer_paths, wire))
        for label, p, spec in classes
    )
    first = per_profile[0][1]
    data = workload.dataset if workload is not None else _dataset(scenario)
    n_train = int(data.n_train) if data is not None else 0
    total_steps = w.total_steps(n_train)
    if workload is not None and not w.surrogate:
        import jax

        shapes = [tuple(leaf.shape) for leaf in jax.tree_util.tree_leaves(workload.params)]
        leaves = tuple(
            (path, shape, nbytes)
            for (path, nbytes), shape in zip(workload.param_leaves, shapes, strict=True)
        )
        opt_state = workload.init_opt_state(workload.params)
        opt_nbytes = sum(
            int(leaf.size * leaf.dtype.itemsize) for leaf in jax.tree_util.tree_leaves(opt_state)
        )
        x = workload.dataset.x_train
        example_nbytes = int(x[0].size * x.dtype.itemsize)
        grad_nbytes = int(workload.param_bytes)
    else:
        leaves = abstract_leaves(scenario, profile)
        opt_nbytes = _opt_state_nbytes(scenario, leaves, total_steps)
        example_nbytes = 4 * math.prod(profile.input_shape) if profile.input_shape else 0
        grad_nbytes = sum(nbytes for _, _, nbytes in leaves)
    if element != 4 or grad != 4:  # mixed precision: what moves is half precision
        leaves = tuple((path, shape, _at(nbytes, grad)) for path, shape, nbytes in leaves)
    return Costs(
        compute_s=first.compute_s,
        grad_nbytes=_at(grad_nbytes, grad),
        param_nbytes=_at(grad_nbytes, element),
        element_nbytes=element,
        optimizer_step_s=first.optimizer_step_s,
        host_optimizer_step_s=(
            0.0
            if scenario.strategy.optimizer_on_device
            else update_seconds(scenario, profile.param_count, DEVICE_PROFILES["cpu"], grad)
        ),
        flops_per_replica_step=float(profile.flops),
        total_steps=total_steps,
        param_leaves=leaves,
        opt_state_nbytes=opt_nbytes,
        example_nbytes=example_nbytes,
        test_examples=len(data.x_test) if data is not None else 0,
        layers=first.layers,
        per_profile=per_profile if len(per_profile) > 1 else (),
    )


def wire_element_nbytes(scenario: Scenario, precision: str) -> tuple[int, int]:
    """(parameter and activation, gradient) bytes an element as they move at ``precision``.

    Under fp16 / bf16 mixed precision parameters (ZeRO-3's and FSDP's gathers) and
    activations (tensor-parallel collectives, pipeline sends) move in the half precision,
    and gradients too unless the strategy says ``grad_reduce: fp32`` (Megatron's
    ``--accumulate-allreduce-grads-in-fp32``); DeepSpeed and Megatron reduce fp16 gradients
    by default. Every other precision moves float32 (tf32 is stored as float32)."""
    from simdist.hardware.profiles import ELEMENT_NBYTES
    from simdist.memory.accounting import FLOAT32_NBYTES, MIXED_PRECISIONS

    if precision not in MIXED_PRECISIONS:
        return FLOAT32_NBYTES, FLOAT32_NBYTES
    half = ELEMENT_NBYTES[precision]
    fp32_grads = scenario.strategy.grad_reduce == "fp32"
    return half, FLOAT32_NBYTES if fp32_grads else half


def recompute_seconds(
    scenario: Scenario,
    profile: ModelProfile,
    times: Sequence[tuple[float, float]],
    device: DeviceProfile | None = None,
) -> list[float]:
    """Each layer's extra forward time in its backward pass under the spec's ``recompute``.

    ``full``: the layer's whole forward again, for every layer of a recomputed block (a
    transformer's blocks; every layer of a model not described by its tensors), as
    Megatron recomputes each checkpoint's layers right before their backward. ``selective``
    (Korthikanti et al. 2022, Sec. 5): the attention core's share of the layer's forward,
    its FLOPs (:attr:`~simdist.activation_memory.LayerTensors.core_flops`, 4·s²·h per
    example) over the layer's forward FLOPs; at fp8 on ``device`` (:func:`fp8_layers`) its
    share of the forward's compute time, the core at bf16 and the linear GEMMs at fp8.
    ``none``: nothing."""
    from simdist.memory.accounting import model_tensors

    mode = scenario.strategy.recompute
    if mode == "none":
        return [0.0] * len(times)
    tensors = {t.name: t for t in model_tensors(scenario) or ()}
    examples = max(1, int(profile.batch_size))
    found = fp8_layers(scenario, profile, device) if device is not None else None
    gemms: Sequence[Fp8Gemms | None] = found or [None] * len(times)
    out = []
    for layer, (f, _), g in zip(profile.layers, times, gemms, strict=True):
        known = tensors.get(layer.name)
        if mode == "full":
            out.append(f if known is None or known.block is not None else 0.0)
        elif known is not None and known.core_flops and layer.forward_flops > 0:
            core, flops = known.core_flops * examples, layer.forward_flops
            if g is not None and device is not None:
                fast = achieved_flops_per_s(device, "fp8")
                rest = achieved_flops_per_s(device, FP8_REST_PRECISION)
                linear = min(g.forward_flops, flops)
                share = (core / rest) / (linear / fast + (flops - linear) / rest)
            else:
                share = core / flops
            out.append(f * min(1.0, share))
        else:
            out.append(0.0)
    return out


def _device_costs(
    scenario: Scenario,
    profile: ModelProfile,
    device: DeviceProfile,
    device_spec: DeviceSpec | None,
    layer_paths: list[tuple[str, ...]],
    wire: tuple[int, int] = (4, 4),
) -> DeviceCosts:
    """The clock model's layers on one device class: its roofline, or its measured step,
    with recomputation's extra forward time in each backward; bytes at ``wire``'s
    (parameter and activation, gradient) element sizes (:func:`wire_element_nbytes`)."""
    times = step_seconds(scenario, profile, device, device_spec)
    measured = measured_step_s(scenario, device_spec)
    compute_s = measured if measured is not None else step_time(times)
    launches = _launch_seconds(
        profile, device, times, measured, fp8_layers(scenario, profile, device)
    )
    extra = recompute_seconds(scenario, profile, times, device)
    full = scenario.strategy.recompute == "full"
    if any(extra):
        times = [(f, b + x) for (f, b), x in zip(times, extra, strict=True)]
        compute_s += math.fsum(extra)
    element, grad = wire
    return DeviceCosts(
        # A measured step (compute_time, examples_per_s) already holds its optimizer step.
        optimizer_step_s=(
            0.0 if measured is not None else optimizer_step_seconds(scenario, profile, device, grad)
        ),
        compute_s=compute_s,
        layers=tuple(
            LayerCost(
                layer.name,
                f,
                b,
                _at(layer.param_nbytes, grad),
                paths,
                _at(layer.output_nbytes, element),
                launch,
                param_nbytes=_at(layer.param_nbytes, element),
                reruns_forward=full and x > 0,
            )
            for layer, (f, b), paths, launch, x in zip(
                profile.layers, times, layer_paths, launches, extra, strict=True
            )
        ),
    )


def optimizer_step_seconds(
    scenario: Scenario, profile: ModelProfile, device: DeviceProfile, grad_nbytes: int
) -> float:
    """Seconds of one optimizer step over all the replica's parameters on ``device``:
    memory-bound, the bytes :func:`simdist.memory.accounting.optimizer_step_nbytes` counts at
    the device's achieved memory bandwidth (a fused multi-tensor kernel, as apex's
    FusedAdam, streams them once). 0 when the optimizer runs off the devices (the spec's
    ``optimizer_on_device``) or the bandwidth is not known."""
    if not scenario.strategy.optimizer_on_device:
        return 0.0
    return update_seconds(scenario, profile.param_count, device, grad_nbytes)


def update_seconds(
    scenario: Scenario, params: int, device: DeviceProfile, grad_nbytes: int
) -> float:
    """Seconds of one optimizer step over ``params`` parameters on ``device``, devices' and
    hosts' alike: the bytes :func:`simdist.memory.accounting.optimizer_step_nbytes` counts
    at its precision, at its achieved memory bandwidth; 0 when that is not known."""
    from simdist.memory.accounting import optimizer_step_nbytes

    bandwidth = device.achieved_bandwidth_Bps
    if bandwidth <= 0:
        return 0.0
    nbytes = optimizer_step_nbytes(
        params,
        precision=device.precision,
        optimizer=scenario.workload.optimizer.name,
        grad_nbytes=grad_nbytes,
    )
    return nbytes / bandwidth


def _at(float32_nbytes: float, element_nbytes: int) -> int:
    """Bytes counted in float32 (as profiles count them) at ``element_nbytes`` an element."""
    return int(float32_nbytes) * element_nbytes // 4


def _launch_seconds(
    profile: ModelProfile,
    device: DeviceProfile,
    times: Sequence[tuple[float, float]],
    measured: float | None,
    fp8: Sequence[Fp8Gemms | None] | None = None,
) -> list[float]:
    """Each layer's fixed launch cost inside its forward (and its backward) time.

    The roofline adds ``device.launch_s`` to every layer pass whose time it prices (not to a
    layer whose source gave its times); a measured step scales it with the rest, by the same
    factor :func:`~simdist.hardware.roofline.calibrate` applied.
    """
    own = [layer.forward_s is not None and layer.backward_s is not None for layer in profile.layers]
    launch = [0.0 if given else float(device.launch_s) for given in own]
    if measured is None or not any(launch):
        return launch
    raw = step_time(layer_times(profile, device, device.precision, fp8))
    return [x * measured / raw for x in launch] if raw > 0 else launch


def _layer_paths(scenario: Scenario, profile: ModelProfile) -> list[tuple[str, ...]]:
    """Each layer's parameter paths, as :attr:`Costs.param_leaves` names them."""
    if scenario.workload.profile is not None:
        return [(layer.name,) if layer.param_nbytes > 0 else () for layer in profile.layers]
    return [tuple(layer.param_paths) for layer in profile.layers]
