"""Failure rates from published fleets, per component, and a job's interruption rates.

A cause of interruption fails one **component** (a GPU, a host, a switch) at a constant rate
per component per day, or stops the **job** as a whole (planned maintenance, at a rate per
job per day). A job's rate of each cause is the per-component rate times the components it
runs on; the job's interruptions are the superposition of all of them.

Sources, with their numbers:

* **Llama 3** (Dubey et al. 2024, "The Llama 3 Herd of Models", arXiv:2407.21783,
  Sec. 3.3.4, Table 5): a 54-day snapshot of Llama 3 405B pre-training on 16,384 H100s in
  2,048 hosts of 8 had 466 job interruptions, 47 planned (automated maintenance) and 419
  unexpected, counted by root cause in Table 5 (:data:`LLAMA3_TABLE5`). The racks hold two
  hosts under one top-of-rack switch (Sec. 3.3.1), so 1,024 switches. The paper's
  percentages do not all match its counts (148 of 419 is 35.3%, printed 30.1%); the counts
  are used here.
* **Kokolis et al. 2024** ("Revisiting Reliability in Large-Scale Machine Learning Research
  Clusters", arXiv:2410.21680, Sec. IV): Meta's research clusters of A100 hosts of 8 fail at
  r_f = 6.50 (RSC-1, 16k GPUs) and 2.34 (RSC-2, 8k GPUs) node failures per 1,000 node-days,
  so a job's mean time to failure falls in inverse proportion to its hosts (1.8 h for 16,384
  GPUs at RSC-1's rate). These are the rates of the hardware of a host (its GPUs and the
  rest); :data:`KOKOLIS_NODE_RATES`.

Presets (``goodput.rates``):

* ``llama3_405b`` — every cause's rate fitted on Table 5: reproduces the snapshot by
  construction, so it cannot also check it.
* ``rsc2_nodes`` / ``rsc1_nodes`` — the hardware of the hosts (Table 5's GPU and Host rows)
  at Kokolis et al.'s node rate of RSC-2 / RSC-1, split between the rows in Table 5's
  proportions; the other rows (switches, software, unplanned host maintenance, planned
  maintenance) as ``llama3_405b``. The check of the Llama 3 count uses ``rsc2_nodes``: its
  host hardware rate comes from a second source (tests/test_goodput_rates.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "COMPONENTS",
    "KOKOLIS_NODE_RATES",
    "LLAMA3_DAYS",
    "LLAMA3_GPUS",
    "LLAMA3_HOSTS",
    "LLAMA3_INTERRUPTIONS",
    "LLAMA3_PLANNED",
    "LLAMA3_SWITCHES",
    "LLAMA3_TABLE5",
    "Cause",
    "JobCause",
    "Layout",
    "expected_interruptions",
    "job_causes",
    "preset",
    "rates_of",
]

#: What a cause fails: one of these per component, or the job.
COMPONENTS = ("gpu", "host", "switch", "job")

LLAMA3_DAYS = 54
LLAMA3_GPUS = 16_384
LLAMA3_HOSTS = 2_048
LLAMA3_SWITCHES = 1_024  # two hosts per rack, one top-of-rack switch (Sec. 3.3.1)
LLAMA3_INTERRUPTIONS = 466
LLAMA3_PLANNED = 47

#: Table 5 of Dubey et al. 2024: (root cause, Table 5's category, count in 54 days, component
#: it is charged to, whether it is host *hardware* — the part Kokolis et al.'s node rate
#: counts). Software bugs, dependencies and NCCL timeouts are charged to the hosts that run
#: the software; "Host Maintenance" is unplanned maintenance of a host.
LLAMA3_TABLE5: tuple[tuple[str, str, int, str, bool], ...] = (
    ("Faulty GPU", "GPU", 148, "gpu", True),
    ("GPU HBM3 Memory", "GPU", 72, "gpu", True),
    ("Software Bug", "Dependency", 54, "host", False),
    ("Network Switch/Cable", "Network", 35, "switch", False),
    ("Host Maintenance", "Unplanned Maintenance", 32, "host", False),
    ("GPU SRAM Memory", "GPU", 19, "gpu", True),
    ("GPU System Processor", "GPU", 17, "gpu", True),
    ("NIC", "Host", 7, "host", True),
    ("NCCL Watchdog Timeouts", "Unknown", 7, "host", False),
    ("Silent Data Corruption", "GPU", 6, "gpu", True),
    ("GPU Thermal Interface + Sensor", "GPU", 6, "gpu", True),
    ("SSD", "Host", 3, "host", True),
    ("Power Supply", "Host", 3, "host", True),
    ("Server Chassis", "Host", 2, "host", True),
    ("IO Expansion Board", "Host", 2, "host", True),
    ("Dependency", "Dependency", 2, "host", False),
    ("CPU", "Host", 2, "host", True),
    ("System Memory", "Host", 2, "host", True),
)

#: Kokolis et al. 2024, Sec. IV: node (host of 8 A100s) failures per node-day.
KOKOLIS_NODE_RATES = {"rsc1": 6.50e-3, "rsc2": 2.34e-3}

_COUNT = {"gpu": LLAMA3_GPUS, "host": LLAMA3_HOSTS, "switch": LLAMA3_SWITCHES, "job": 1}


@dataclass(frozen=True)
class Cause:
    """One cause of interruption: its name, the component it fails, its rate per component
    per day, whether it is planned (the job checkpoints, then stops: no work lost), and
    whether it takes out only the data-parallel copies on that component (GPU and host
    hardware) or the whole job (switches, software, maintenance) under elastic recovery."""

    name: str
    component: str
    per_day: float
    planned: bool = False
    local: bool = False


@dataclass(frozen=True)
class Layout:
    """The job's components and how one GPU or host failure spreads: its ``gpus``, ``hosts``,
    ``switches``, data-parallel ``replicas`` and the replicas one host holds parts of."""

    gpus: int
    hosts: int
    switches: int
    replicas: int
    replicas_per_host: int = 1

    def count(self, component: str) -> int:
        """How many of ``component`` the job runs on."""
        return {"gpu": self.gpus, "host": self.hosts, "switch": self.switches, "job": 1}[component]


@dataclass(frozen=True)
class JobCause:
    """A cause at the scale of one job: its rate per second and the replicas it takes out
    under elastic recovery (0: the whole job stops)."""

    cause: Cause
    rate_per_s: float
    replicas_lost: int


def _table5(node_rate: float | None = None) -> tuple[Cause, ...]:
    """Table 5's causes at their fitted rates; with ``node_rate``, the host hardware rows
    rescaled so that their sum per host-day is that rate (Table 5's proportions kept)."""
    hardware = sum(count for *_, count, _, hw in LLAMA3_TABLE5 if hw)
    scale = 1.0
    if node_rate is not None:
        scale = node_rate / (hardware / (LLAMA3_HOSTS * LLAMA3_DAYS))
    causes = [
        Cause(
            name,
            component,
            count / (_COUNT[component] * LLAMA3_DAYS) * (scale if hw else 1.0),
            local=hw or name == "Host Maintenance",
        )
        for name, _, count, component, hw in LLAMA3_TABLE5
    ]
    causes.append(Cause("Planned maintenance", "job", LLAMA3_PLANNED / LLAMA3_DAYS, planned=True))
    return tuple(causes)


def preset(name: str) -> tuple[Cause, ...]:
    """The causes of a named preset (module doc)."""
    if name == "llama3_405b":
        return _table5()
    if name in ("rsc1_nodes", "rsc2_nodes"):
        return _table5(KOKOLIS_NODE_RATES[name[:4]])
    raise ValueError(f"unknown rate preset {name!r}")


def rates_of(spec: str | Any) -> tuple[Cause, ...]:
    """The causes a scenario's ``goodput.rates`` names: a preset, or per-component rates."""
    if isinstance(spec, str):
        return preset(spec)
    if spec.preset is not None:
        return preset(spec.preset)
    return tuple(
        Cause(name, component, per_day, planned=component == "job", local=local)
        for name, component, per_day, local in (
            ("GPU", "gpu", spec.gpu, True),
            ("Host", "host", spec.host, True),
            ("Switch", "switch", spec.switch, False),
            ("Planned maintenance", "job", spec.planned, False),
        )
        if per_day > 0
    )


def job_causes(causes: tuple[Cause, ...], layout: Layout, elastic: bool) -> list[JobCause]:
    """Each cause's rate for a job of ``layout`` (per second), and what it takes out.

    Under elastic recovery a GPU's failure takes out its data-parallel copy and a host's the
    copies it holds parts of; everything else (and everything under stop-and-restart) stops
    the job."""
    out = []
    for cause in causes:
        rate = cause.per_day * layout.count(cause.component) / 86400.0
        if rate <= 0:
            continue
        lost = 0
        if elastic and cause.local:
            lost = 1 if cause.component == "gpu" else layout.replicas_per_host
        out.append(JobCause(cause, rate, lost))
    return out


def expected_interruptions(
    causes: tuple[Cause, ...], layout: Layout, days: float
) -> Mapping[str, float]:
    """The mean count of each cause's interruptions in ``days`` of wall clock."""
    return {c.cause.name: c.rate_per_s * days * 86400.0 for c in job_causes(causes, layout, False)}
