"""The memory check of a model, and a disk record of model sizes; no JAX.

``simdist validate`` checks that the scenario's model can be built on the data's
shapes and fits in memory. Building it on shapes needs JAX and Flax (about a second to
import); once a model has been built on given shapes, its parameter count and bytes are
kept in the per-user cache (``<cache_dir()>/models``), keyed by the model's spec, the
input shape, the outputs, the JAX and Flax versions and a hash of ``models.py``, so a
later validate of the same model does the same memory arithmetic without JAX. The clock
model's layers at batch 1 (:class:`Footprint`: what a device holds per example) are kept
the same way, for the memory check of every strategy and the pipeline's layer count.
Only models that were built are recorded: a model that does not fit its data is checked
(and its error raised) by JAX every time.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from simdist.compile_cache import cache_dir
from simdist.errors import DataError

if TYPE_CHECKING:
    from simdist.activation_memory import LayerTensors
    from simdist.layers import ModelProfile
    from simdist.scenario.workload import ModelSpec

__all__ = [
    "OPTIMIZER_COPIES",
    "PARAM_COPIES",
    "Footprint",
    "check_param_bytes",
    "clock_footprint",
    "gpt_footprint",
    "known_model_size",
    "physical_memory_nbytes",
    "remember_model_size",
]

#: Copies of the parameters a run holds at once: values, gradients, optimizer moments.
PARAM_COPIES = 4
_FORMAT = 1  # bump when the meaning of a record changes
#: Copies of the parameters each optimizer keeps as its state (optax: sgd none, the
#: momentum trace, Adam's first and second moments).
OPTIMIZER_COPIES = {"sgd": 0, "momentum": 1, "adam": 2}


@dataclass(frozen=True)
class Footprint:
    """What the clock model's layers hold on a device, from its profile.

    Per layer in forward order: its name, its parameter bytes and its output's bytes for one
    example (what a backward pass keeps: the activations a pipeline stage stashes per
    micro-batch); ``example_nbytes``: one input example. A profile file of unknown batch
    (``batch_size`` 0, as ASTRA-sim's) is one step as given at any batch: its outputs are
    the step's (``per_example`` false), as :func:`simdist.runtime.costs.scale_profile` reads them.
    """

    layer_names: tuple[str, ...]
    layer_param_nbytes: tuple[int, ...]
    layer_output_nbytes: tuple[float, ...]
    example_nbytes: int
    per_example: bool = True
    # Each layer's stored tensors per example where the model's sizes say them (a gpt:
    # :func:`simdist.activation_memory.gpt_layer_tensors`); empty: read from the outputs.
    layer_tensors: tuple[LayerTensors, ...] = field(default=(), compare=False)

    def outputs_at(self, batch: int) -> list[float]:
        """Each layer's output bytes for a batch of ``batch`` examples."""
        scale = batch if self.per_example else 1
        return [x * scale for x in self.layer_output_nbytes]

    @classmethod
    def of(cls, profile: ModelProfile) -> Footprint:
        """The footprint of a profile of ``profile.batch_size`` examples (0: one step)."""
        per = max(1, int(profile.batch_size))
        shape = profile.input_shape
        return cls(
            tuple(layer.name for layer in profile.layers),
            tuple(int(layer.param_nbytes) for layer in profile.layers),
            tuple(int(layer.output_nbytes) / per for layer in profile.layers),
            4 * math.prod(shape) if shape else 0,
            per_example=int(profile.batch_size) > 0,
        )

    @property
    def param_nbytes(self) -> int:
        """All parameters."""
        return sum(self.layer_param_nbytes)

    @property
    def activation_nbytes(self) -> float:
        """Every layer's output for one example (for one step when not ``per_example``)."""
        return sum(self.layer_output_nbytes)


def physical_memory_nbytes() -> int | None:
    """This machine's RAM in bytes, or None where the system does not say."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def check_param_bytes(count: int, nbytes: int, model_spec: ModelSpec) -> None:
    """Refuse a model of ``count`` parameters in ``nbytes`` whose parameters, gradients and
    optimizer state exceed the RAM (XLA on CPU would wait forever for such a buffer)."""
    memory = physical_memory_nbytes()
    if memory is None or PARAM_COPIES * nbytes <= memory:
        return
    raise DataError(
        f"model {model_spec.name}",
        "workload.model",
        f"has {count:,} parameters ({nbytes / 1e9:.3g} GB); with its gradients and optimizer "
        f"state a run needs about {PARAM_COPIES * nbytes / 1e9:.3g} GB, more than this "
        f"machine's {memory / 1e9:.3g} GB of memory: make it smaller, e.g. hidden: [128]",
    )


@lru_cache(maxsize=1)
def _code_key() -> str:
    """JAX and Flax versions and a hash of the model zoo's source: what a size depends on."""
    versions = []
    for package in ("jax", "flax"):
        try:
            versions.append(metadata.version(package))
        except metadata.PackageNotFoundError:
            versions.append("")
    source = (Path(__file__).parent / "models.py").read_bytes()
    return json.dumps([versions, hashlib.sha256(source).hexdigest()])


def _record_path(
    model_spec: ModelSpec,
    input_shape: tuple[int, ...] | None,
    n_outputs: int | None,
    kind: str = "",
) -> Path:
    key = json.dumps(
        [
            _FORMAT,
            *([kind] if kind else []),
            model_spec.model_dump(mode="json"),
            None if input_shape is None else list(input_shape),
            None if n_outputs is None else int(n_outputs),
            _code_key(),
        ],
        sort_keys=True,
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:32]
    return cache_dir() / "models" / f"{digest}.json"


def known_model_size(
    model_spec: ModelSpec, input_shape: tuple[int, ...], n_outputs: int
) -> tuple[int, int] | None:
    """(parameter count, bytes) recorded for this model on these shapes, or None."""
    path = _record_path(model_spec, input_shape, n_outputs)
    try:
        record = json.loads(path.read_text())
        return int(record["count"]), int(record["nbytes"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def remember_model_size(
    model_spec: ModelSpec, input_shape: tuple[int, ...], n_outputs: int, count: int, nbytes: int
) -> None:
    """Record a model built on these shapes (atomically; a failure to write is ignored)."""
    path = _record_path(model_spec, input_shape, n_outputs)
    _write_record(path, {"count": int(count), "nbytes": int(nbytes)})


def _write_record(path: Path, record: dict) -> None:
    """Write ``record`` at ``path`` atomically; a failure to write is ignored."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # named so that `simdist cache clear` knows it for its own (compile_cache.CACHE_FILES)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(record, f)
        os.replace(tmp, path)
    except OSError:
        pass


@lru_cache(maxsize=1)
def _costing_digest() -> str:
    """A hash of the sources a footprint also depends on: the costing and the full-size
    models (the zoo's models.py is in every record's key)."""
    here = Path(__file__).parent
    files = [here / "profile.py", *sorted((here / "fullsize").glob("*.py"))]
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


#: Footprints this process has read or costed (a sweep checks the same model per point).
_footprints: dict[Path, Footprint] = {}
_FOOTPRINTS_KEPT = 64


def _read_footprint(path: Path) -> Footprint | None:
    """The footprint recorded at ``path``; None when missing or unreadable."""
    try:
        record = json.loads(path.read_text())
        footprint = Footprint(
            tuple(str(n) for n in record["layer_names"]),
            tuple(int(n) for n in record["layer_param_nbytes"]),
            tuple(float(n) for n in record["layer_output_nbytes"]),
            int(record["example_nbytes"]),
            bool(record["per_example"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    n = len(footprint.layer_names)
    same = len(footprint.layer_param_nbytes) == len(footprint.layer_output_nbytes) == n
    return footprint if same else None


def gpt_footprint(model_spec: ModelSpec, input_shape: tuple[int, ...] | None) -> Footprint | None:
    """The :class:`Footprint` of a gpt (or GPT-2) counted from its sizes, without building it
    (:mod:`simdist.model_size`): what JAX would find, in microseconds at any depth. None for
    other models, and for an input the model cannot take (its build says why)."""
    from simdist.activation_memory import gpt_layer_tensors
    from simdist.catalog import GPT_DEFAULTS
    from simdist.gpt_shape import GptShape
    from simdist.model_size import FLOAT32_NBYTES, TOKEN_NBYTES, gpt_layers

    if model_spec.name not in ("gpt", "gpt2"):
        return None
    sizes = model_spec.gpt_sizes() or dict(GPT_DEFAULTS)
    tokens = sizes["seq_len"] if input_shape is None else input_shape[0]
    if input_shape is not None and (len(input_shape) != 1 or not 1 <= tokens <= sizes["seq_len"]):
        return None
    shape = GptShape(**sizes)
    layers = gpt_layers(shape, tokens=tokens)
    return Footprint(
        tuple(layer.name for layer in layers),
        tuple(layer.params * FLOAT32_NBYTES for layer in layers),
        tuple(float(layer.output_elements * FLOAT32_NBYTES) for layer in layers),
        tokens * TOKEN_NBYTES,
        layer_tensors=tuple(gpt_layer_tensors(shape, tokens=tokens)),
    )


def clock_footprint(
    model_spec: ModelSpec, input_shape: tuple[int, ...] | None, n_outputs: int | None
) -> Footprint:
    """The :class:`Footprint` of zoo model ``model_spec`` on these shapes (None: its own).

    Read from the per-user record when this model was costed on these shapes before (no
    JAX); else costed at batch 1 by :func:`simdist.numerics.profile.profile_model` and
    recorded. Raises :class:`~simdist.errors.SimdistError` for shapes the model cannot take.
    """
    counted = gpt_footprint(model_spec, input_shape)
    if counted is not None:
        return counted
    path = _record_path(model_spec, input_shape, n_outputs, f"footprint:{_costing_digest()}")
    known = _footprints.get(path) or _read_footprint(path)
    if known is not None:
        _footprints[path] = known
        return known
    from simdist.numerics.profile import profile_model

    footprint = Footprint.of(profile_model(model_spec, 1, input_shape, n_outputs))
    if len(_footprints) >= _FOOTPRINTS_KEPT:
        _footprints.clear()
    _footprints[path] = footprint
    record = {
        "layer_names": footprint.layer_names,
        "layer_param_nbytes": footprint.layer_param_nbytes,
        "layer_output_nbytes": footprint.layer_output_nbytes,
        "example_nbytes": footprint.example_nbytes,
        "per_example": footprint.per_example,
    }
    _write_record(path, record)
    return footprint
