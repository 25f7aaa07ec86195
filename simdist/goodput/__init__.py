"""Goodput at scale: weeks of training on thousands of GPUs, at the level of failures,
checkpoints and restarts (``simdist goodput``; docs/GOODPUT.md).

One idea per module:

* :mod:`~simdist.goodput.rates` — failure rates per component from published fleets (Llama 3's
  Table 5, Kokolis et al.'s node rates) and a job's interruption rates from its layout;
* :mod:`~simdist.goodput.failures` — the seeded stream of (time, cause), exponential or Weibull;
* :mod:`~simdist.goodput.checkpoint` — a checkpoint's and a restart's cost from the bytes per
  device, synchronous or asynchronous;
* :mod:`~simdist.goodput.horizon` — the long-horizon loop: exact lost work, whole checkpoint
  cycles advanced at once, stop-and-restart or elastic;
* :mod:`~simdist.goodput.young_daly` — the optimum interval in closed form;
* :mod:`~simdist.goodput.study` — seeds, the interval and cluster-size sweeps, the Poisson band;
* :mod:`~simdist.goodput.measure` — the step time and checkpoint bytes from the engine;
* :mod:`~simdist.goodput.run` — a scenario's whole study, written by
  :mod:`simdist.goodput.report`.
"""
