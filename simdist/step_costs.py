"""What one training step costs, as the engine measures it once before the clock starts.

:class:`Costs` (the step: compute per replica, the bytes of gradients, parameters,
optimizer state and examples), its layers (:class:`LayerCost`) and, on a mixed cluster,
each device class's own (:class:`DeviceCosts`). :mod:`simdist.runtime.costs` makes them;
strategies, the memory model and the summary read them. Pure data: no SimPy, no JAX.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

__all__ = ["AS_GRADIENT", "Costs", "DeviceCosts", "LayerCost"]

#: ``param_nbytes`` left out: the parameters take the gradient's bytes (a dense gradient
#: has one entry per parameter). A compressed or sharded gradient gives both.
AS_GRADIENT = -1


@dataclass(frozen=True)
class LayerCost:
    """One layer's share of a replica step: its compute times, its gradient's and its
    parameters' bytes.

    ``param_nbytes`` defaults to ``grad_nbytes`` (:data:`AS_GRADIENT`): memory figures
    read parameters, the all-reduces read gradients, so shrinking one leaves the other.
    """

    name: str
    forward_s: float
    backward_s: float
    grad_nbytes: int
    param_paths: tuple[str, ...] = ()  # pytree paths of its parameters, in tree order
    output_nbytes: int = 0  # its output activation on the per-replica batch (pipelines)
    # The fixed launch cost inside forward_s and inside backward_s (each), calibrated like
    # them; a pipeline pays it once per micro-batch instead of dividing it by M.
    launch_s: float = 0.0
    param_nbytes: int = field(default=AS_GRADIENT, kw_only=True)
    #: Its backward computes its whole forward again first (``recompute: full``; the extra
    #: time is inside ``backward_s``), so a tensor group runs the forward's collectives again.
    reruns_forward: bool = field(default=False, kw_only=True)

    def __post_init__(self) -> None:
        if self.param_nbytes == AS_GRADIENT:
            object.__setattr__(self, "param_nbytes", self.grad_nbytes)


@dataclass(frozen=True)
class DeviceCosts:
    """One device class's compute on the per-replica batch: the step and its layers."""

    compute_s: float
    layers: tuple[LayerCost, ...] = ()
    optimizer_step_s: float = 0.0  # one whole replica's optimizer step on this class


@dataclass(frozen=True)
class Costs:
    """Per-step quantities the engine measures once, before the clock starts.

    ``compute_s`` and ``layers`` are those of worker 0's devices. A mixed cluster (worker
    hosts with different device profiles) also lists every device class's own in
    ``per_profile`` (label of :attr:`simdist.hardware.cluster.Cluster.profiles` → its
    :class:`DeviceCosts`); :meth:`for_profile` gives the costs a device of a class sees.
    Homogeneous clusters leave it empty.

    Four kinds of bytes, each read by what it sizes: ``grad_nbytes`` (all-reduces, pushes),
    ``param_nbytes`` (pulls, fetches, a stage's memory), ``opt_state_nbytes`` and
    :attr:`checkpoint_nbytes` (the two together, written and restored).
    """

    compute_s: float  # one replica's forward + backward on its per-replica batch
    grad_nbytes: int  # bytes of one full gradient, as the replicas exchange it
    flops_per_replica_step: float  # the clock model's FLOPs per replica step (XLA cost analysis)
    total_steps: int  # training steps (sync) or applied gradients (async) to run
    param_leaves: tuple[tuple[str, tuple[int, ...], int], ...] = ()  # (path, shape, nbytes)
    opt_state_nbytes: int = 0  # bytes of the optimizer state (momentum, Adam moments, ...)
    example_nbytes: int = 0  # bytes of one input example, for the input pipeline's bandwidth
    test_examples: int = 0  # size of the test set, for the chief's evaluation cost
    # Per-layer times in forward order (their sum is compute_s); empty: one layer, the step.
    layers: tuple[LayerCost, ...] = ()
    # Mixed clusters: each device class's own compute (label, costs), worker 0's first.
    per_profile: tuple[tuple[str, DeviceCosts], ...] = ()
    # Bytes of the parameters (what a pull fetches, a ZeRO-3 gather moves, a stage holds).
    param_nbytes: int = field(default=AS_GRADIENT, kw_only=True)
    # Bytes of one parameter and activation element as they move: the training precision's
    # (2 under fp16 / bf16 mixed precision, 4 else). Parameter, output and leaf bytes are
    # counted at it; the memory model reads parameter counts through it.
    element_nbytes: int = field(default=4, kw_only=True)
    # Seconds of one optimizer step over the whole replica's parameters on worker 0's
    # device class (memory-bound: simdist.memory.accounting.optimizer_step_nbytes at its memory
    # bandwidth); a strategy divides it as it splits the optimizer. 0: not on the clock
    # (hand-made costs, an optimizer off the devices).
    optimizer_step_s: float = field(default=0.0, kw_only=True)
    # Seconds of that step on a host's CPU (the ``cpu`` profile's memory bandwidth, float32
    # variables) when the optimizer runs off the devices: a parameter server applies its
    # share of it per gradient. 0: on the devices, or not on the clock.
    host_optimizer_step_s: float = field(default=0.0, kw_only=True)

    def __post_init__(self) -> None:
        if self.param_nbytes == AS_GRADIENT:
            object.__setattr__(self, "param_nbytes", self.grad_nbytes)

    @property
    def checkpoint_nbytes(self) -> int:
        """A checkpoint holds the float32 parameters and the optimizer state."""
        return self.param_nbytes * 4 // max(1, self.element_nbytes) + self.opt_state_nbytes

    def for_profile(self, label: str) -> Costs:
        """These costs with the compute time and layers of device class ``label``
        (unchanged when it has none of its own: a homogeneous cluster)."""
        for name, own in self.per_profile:
            if name == label:
                return replace(
                    self,
                    compute_s=own.compute_s,
                    layers=own.layers,
                    optimizer_step_s=own.optimizer_step_s,
                )
        return self
