"""Before and after a run: what :func:`preflight` checks before the first step (the run's
size, data files, the clock model's layers, every device's memory, ``--out``) and the
warnings of :func:`warnings_after`.

Part of the Python API (:mod:`simdist.api` re-exports it); like ``simdist validate``, it
starts without pandas, SimPy or the engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from simdist.errors import DataError, ScenarioError, SimdistError

if TYPE_CHECKING:
    from simdist.numerics.memory import Footprint
    from simdist.runtime.engine import Result
    from simdist.scenario.schema import Scenario


#: Above this estimated wall time a run is called huge (a warning, not an error).
HUGE_RUN_S = 3600.0
#: Rough wall time per simulated step: per training device or PS task, and for the
#: numerics (one jitted gradient and update); measured on a 2-core CPU for digits/mlp.
WALL_S_PER_TASK_STEP = 30e-6
WALL_S_PER_NUMERIC_STEP = 1e-3
#: Costing the clock model before the first step (its layers lowered on shapes, the
#: optimizer state sized), per layer of the model: measured on a 2-core CPU with a gpt of
#: 20,000 blocks (40,002 layers: 220 s, 2.1 GB at its peak), rounded up. Only models of
#: thousands of layers make these matter, and the gpt caps them at 200,002.
WALL_S_PER_MODEL_LAYER = 6e-3
HOST_BYTES_PER_MODEL_LAYER = 50e3
#: ``simdist validate`` simulates a run's clock (timing-only) to tell whether a scheduled
#: failure falls after the run's end when that takes at most this long (estimated).
VALIDATE_SIMULATE_S = 30.0
#: A final train loss this many times its first is reported as a likely divergence.
BLOW_UP_FACTOR = 10.0
#: Least memory one simulated step of one task takes: a run keeps its events and metrics
#: until the report is written (measured 600-1,800 bytes with the tables built).
RECORD_BYTES_PER_TASK_STEP = 300


@dataclass(frozen=True)
class Preflight:
    """What :func:`preflight` found: the run's expected size, and warnings to print.

    ``total_steps`` is None only for ``epochs`` without a data set (refused at load);
    ``train_examples`` is None when the scenario trains on no data set.
    """

    total_steps: int | None
    train_examples: int | None
    wall_s: float
    warnings: tuple[str, ...] = ()


def _duration_words(seconds: float) -> str:
    """``3.2 h``, ``12 days``, ``4.1e+20 years``: the scale a person reads at a glance."""
    for unit, size in (("years", 365.25 * 86400), ("days", 86400.0), ("h", 3600.0)):
        if seconds >= size:
            value = seconds / size
            return f"{value:.3g} {unit}" if value < 1e6 else f"{value:.2g} {unit}"
    return f"{seconds / 60:.3g} min"


def _batch_field(scenario: Scenario) -> str:
    given = scenario.workload.model_fields_set
    return "workload.global_batch_size" if "global_batch_size" in given else "workload.batch_size"


def _check_files_and_model(scenario: Scenario, source: str) -> None:
    """Read the data files whole and build the model on shapes: what a run's first
    moments would refuse (a bad npz or init_from, a model too large for the memory or
    unfit for the data). Raises DataError, or ScenarioError naming ``source``."""
    from simdist.catalog import FULLSIZE_MODELS
    from simdist.numerics.memory import check_param_bytes, known_model_size
    from simdist.numerics.sizes import model_inputs

    w = scenario.workload
    if w.dataset is not None:
        shape, outputs = model_inputs(w.dataset, scenario.seed)
        if w.model is not None and w.model.name not in FULLSIZE_MODELS:
            known = known_model_size(w.model, shape, outputs) if w.init_from is None else None
            if known is not None:  # built on these shapes before: no JAX needed
                check_param_bytes(*known, w.model)
                return
            from simdist.numerics.executor import check_model

            try:
                check_model(w.model, shape, outputs, w.init_from)
            except DataError:
                raise
            except SimdistError as exc:  # e.g. a cnn on flat vectors
                raise ScenarioError(source, "workload.model", str(exc)) from None
            return
    if w.init_from is not None:
        from simdist.numerics.param_files import read_params_file

        read_params_file(w.init_from)


def _footprint(scenario: Scenario, source: str) -> Footprint:
    """What one example costs a device, from the clock model's layers (a profile file, or
    the zoo model on the shapes the run gives it: the per-user record, else JAX at batch 1).
    An unreadable profile file or a shape the model cannot take raises a ScenarioError."""
    from simdist.catalog import FULLSIZE_MODELS
    from simdist.layers import read_profile
    from simdist.numerics.memory import Footprint, clock_footprint
    from simdist.numerics.sizes import model_inputs

    w = scenario.workload
    try:
        if w.profile is not None:
            return Footprint.of(read_profile(w.profile))
        shape: tuple[int, ...] | None = None
        n_outputs: int | None = None
        if (
            w.timing_model is None
            and w.clock_model.name not in FULLSIZE_MODELS
            and w.dataset is not None
        ):
            shape, n_outputs = model_inputs(w.dataset, scenario.seed)
        if w.input_shape:
            shape = tuple(int(d) for d in w.input_shape)
        return clock_footprint(w.clock_model, shape, n_outputs)
    except DataError:
        raise
    except SimdistError as exc:
        field = "workload.input_shape" if w.input_shape and w.profile is None else None
        from simdist.memory.fit import clock_field

        raise ScenarioError(source, field or clock_field(scenario), str(exc)) from None


def _check_clock(scenario: Scenario, source: str, total_steps: int) -> int:
    """What a run checks as it costs its clock model: the profile file, the model's shapes,
    the pipeline's stages and every device's memory (the strategy spec's ``check_memory``,
    :mod:`simdist.memory.fit`). Returns the clock model's layer count."""
    if scenario.runs_on_devices:  # the footprint may start JAX: with the run's devices
        from simdist.numerics.executor import ensure_devices

        ensure_devices(scenario.numeric_devices)
    footprint = _footprint(scenario, source)
    if not scenario.strategy.check_memory(scenario, footprint, source, total_steps):
        from simdist.memory.fit import check_device_memory
        from simdist.strategies import spec_classes

        own = type(scenario.strategy)
        splitters = [c.splits_replica for c in spec_classes() if c.splits_replica and c is not own]
        check_device_memory(scenario, footprint, source, splitters)
    return len(footprint.layer_names)


def preflight(
    scenario: Scenario,
    *,
    out: str | Path | None = None,
    source: str | None = None,
    data: bool = False,
    ends: bool = True,
) -> Preflight:
    """Check what a run of ``scenario`` would hit before its first step, and estimate it.

    Raises :class:`~simdist.errors.ScenarioError` (naming ``source``, the scenario's
    file) for a global batch larger than the training set (with numerics on), a data
    file that cannot be used, and what a run would refuse as it costs its clock model: a
    profile file it cannot read, an input shape the model cannot take, pipeline stages and
    partitions that do not match the layers, and a
    replica or pipeline stage that does not fit its device's memory
    (:mod:`simdist.memory.fit`); :class:`~simdist.errors.SimdistError` for an ``out``
    that cannot be a report folder. Both ``simdist run`` and ``simdist validate`` call it,
    so both refuse these with the same message. Returns the expected step count, a rough wall time
    and warnings, e.g. for a run that would take longer than an hour.

    ``data=True`` (``simdist validate``) also reads an npz data set and an ``init_from``
    file whole and checks their values, and checks the model on shapes alone (its size
    against the memory, ``init_from`` against its parameters); a run does all that as it
    builds its workload. With ``data=True`` and ``ends`` (not for a job of ``jobs:``, which
    ends in company), a failure scheduled after the run's end is warned about as
    :func:`warnings_after` warns after a run, the run's clock simulated timing-only to know
    its end (:func:`_scheduled_failures`).
    """
    from simdist.numerics.sizes import train_examples
    from simdist.report.tables import check_output_folder
    from simdist.spec import show

    source = source or f"<scenario {scenario.name}>"
    if scenario.jobs is not None:
        return _preflight_jobs(scenario, out=out, source=source, data=data)
    if out is not None:
        check_output_folder(Path(out))
    w = scenario.workload
    n_train = None
    try:
        if w.dataset is not None:
            n_train = train_examples(w.dataset, scenario.seed)
        if data:
            _check_files_and_model(scenario, source)
    except DataError as exc:
        raise exc.in_scenario(source) from None
    batch = scenario.global_batch
    if scenario.numerics and n_train is not None and batch > n_train:
        per = max(1, n_train // scenario.replicas)
        raise ScenarioError(
            source,
            _batch_field(scenario),
            f"the global batch of {batch:,} examples ({scenario.replicas} replica(s) x "
            f"{w.batch_size:,}) is larger than the training set of {n_train:,} "
            f"({w.dataset.name}); a step draws distinct examples, so use at most "
            f"{n_train:,}, e.g. batch_size: {per}",
        )
    total = w.steps
    if total is None and n_train is not None:
        total = w.total_steps(n_train)
    try:
        layers = _check_clock(scenario, source, min(total or 1, 10**9))
    except DataError as exc:
        raise exc.in_scenario(source) from None
    _check_costing_memory(scenario, source, layers)
    warnings = []
    if scenario.runs_on_devices:  # _check_clock has set up the devices (ensure_devices)
        from simdist.numerics.device_allreduce import fallback_warning

        note = fallback_warning(scenario.numeric_devices)
        if note is not None:
            warnings.append(f"{source}: strategy.execution: {note}")
    tasks = max(1, scenario.replicas + scenario.cluster.ps)
    per_step = WALL_S_PER_TASK_STEP * tasks + (WALL_S_PER_NUMERIC_STEP if scenario.numerics else 0)
    steps = float(min(total or 0, 10**300))
    wall = per_step * steps + WALL_S_PER_MODEL_LAYER * layers
    if wall > HUGE_RUN_S:
        from simdist.numerics.memory import physical_memory_nbytes

        field = "workload.steps" if w.steps is not None else "workload.epochs"
        huge = (
            f"{f'{total:,}' if total < 10**15 else show(total)} steps is huge: simulating them "
            f"would take about {_duration_words(wall)} of wall time (roughly "
            f"{per_step * 1e3:.2g} ms a step here)"
        )
        memory, ram = RECORD_BYTES_PER_TASK_STEP * tasks * steps, physical_memory_nbytes()
        if ram is not None and memory > ram:
            raise ScenarioError(
                source,
                field,
                f"{huge} and at least {memory / 1e9:.2g} GB of memory for what it records "
                f"(kept until the report is written), more than this machine's "
                f"{ram / 1e9:.3g} GB; e.g. steps: 1000",
            )
        warnings.append(f"{source}: {field}: {huge}; Ctrl-C stops a run")
    if data and ends:
        timing_wall = WALL_S_PER_TASK_STEP * tasks * steps + WALL_S_PER_MODEL_LAYER * layers
        warnings += _scheduled_failures(scenario, source, timing_wall)
    return Preflight(total, n_train, wall, tuple(warnings))


def _check_costing_memory(scenario: Scenario, source: str, layers: int) -> None:
    """Refuse a clock model whose costing would need more of this machine's memory than it
    has (:data:`HOST_BYTES_PER_MODEL_LAYER` a layer): a gpt of 10^5 blocks fits a cluster
    of many devices, but costing it takes about 10 GB here, before the first step."""
    from simdist.numerics.memory import physical_memory_nbytes

    need, ram = HOST_BYTES_PER_MODEL_LAYER * layers, physical_memory_nbytes()
    if ram is None or need <= ram:
        return
    from simdist.memory.fit import clock_field

    raise ScenarioError(
        source,
        clock_field(scenario),
        f"has {layers:,} layers; costing them before the first step takes about "
        f"{need / 1e9:.3g} GB of this machine's memory (measured about "
        f"{HOST_BYTES_PER_MODEL_LAYER / 1e3:.0f} KB a layer), more than its {ram / 1e9:.3g} GB; "
        "use a model of fewer layers",
    )


def _preflight_jobs(
    scenario: Scenario, *, out: str | Path | None, source: str, data: bool
) -> Preflight:
    """:func:`preflight` of every job of a scenario with ``jobs:``, its errors at the job's
    fields; the step count and wall time add up (each job also runs alone, timing-only)."""
    from simdist.report.tables import check_output_folder
    from simdist.scenario.jobs import job_field

    if out is not None:
        check_output_folder(Path(out))
    total, wall, warnings = 0, 0.0, []
    for i, js in enumerate(scenario.job_scenarios):
        try:
            checked = preflight(js, source=source, data=data, ends=False)
        except ScenarioError as exc:
            raise ScenarioError(exc.source, job_field(i, exc.field), exc.message) from None
        total += checked.total_steps or 0
        wall += checked.wall_s
        warnings += [w.replace(f"{source}: ", f"{source}: jobs[{i}].", 1) for w in checked.warnings]
    return Preflight(total, None, wall, tuple(warnings))


def failures_after(scenario: Scenario, end_s: float, source: str) -> list[str]:
    """A warning for each failure scheduled (``at``) after a run of ``scenario`` that ended
    at simulated ``end_s``: it never happened. Both :func:`warnings_after` (a run) and
    :func:`preflight` (``simdist validate``, after simulating the clock) say it."""
    from simdist.units import format_duration

    warnings = []
    for i, failure in enumerate(scenario.faults.failures):
        if failure.at_s is not None and failure.at_s > end_s:
            at = failure.at_s
            when = f"{at / 3600:,.6g} h" if at >= 3600 else format_duration(at)
            warnings.append(
                f"{source}: faults.failures[{i}].at: {when} is after the run ended at "
                f"simulated t = {format_duration(end_s)}; this failure never happened"
            )
    return warnings


def _scheduled_failures(scenario: Scenario, source: str, wall_s: float) -> list[str]:
    """``simdist validate``'s warnings on failures scheduled after the run's end, as
    :func:`warnings_after` gives them after a run: when the run ends is known only by
    simulating it, so its clock is simulated timing-only (the same clock as the full run,
    tests/test_timing_only.py) when a failure has an ``at`` and that takes at most
    :data:`VALIDATE_SIMULATE_S`. A run whose loss diverges stops earlier than its clock
    says; validate cannot know that."""
    if not any(f.at_s is not None for f in scenario.faults.failures):
        return []
    if wall_s > VALIDATE_SIMULATE_S:
        return [
            f"{source}: faults.failures: validate does not simulate a run this long (about "
            f"{_duration_words(wall_s) if wall_s >= 60 else f'{wall_s:.2g} s'}) to see when it "
            "ends; simdist run warns about a "
            "failure scheduled after the run's end"
        ]
    from simdist.runtime.engine import run as run_engine
    from simdist.scenario.load import resolve_scenario

    timing = resolve_scenario(scenario, ["numerics=false"]) if scenario.numerics else scenario
    end_s = float(run_engine(timing).summary["simulated_time_s"])
    return failures_after(scenario, end_s, source)


def warnings_after(result: Result, source: str | None = None) -> list[str]:
    """Warnings about a finished run: what the scenario asked for that did not happen.

    A failure scheduled after the run ended (it never happened), and a train loss that
    blew up without becoming NaN or inf (its last value far above its first).
    """
    scenario, summary = result.scenario, result.summary
    source = source or f"<scenario {scenario.name}>"
    warnings = failures_after(scenario, float(summary["simulated_time_s"]), source)
    losses = result.metrics.loc[result.metrics["metric"] == "train_loss", "value"]
    if not summary.get("diverged") and len(losses) > 1:
        first, last = float(losses.iloc[0]), float(losses.iloc[-1])
        if first > 0 and last > BLOW_UP_FACTOR * first:
            warnings.append(
                f"{source}: workload.optimizer.learning_rate: the train loss rose from "
                f"{first:.4g} at the first step to {last:.4g} at the last without becoming "
                "NaN or inf; the run has probably diverged, e.g. try a smaller learning_rate"
            )
    return warnings
