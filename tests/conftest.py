"""Strict test set-up, after Equinox's conftest: the CPU backend (unless JAX_PLATFORMS says
otherwise), 8 emulated CPU devices, x64 off, no implicit rank promotion, and every warning
raised from simdist's own code is an error.

It also tells pytest-xdist how to share the work between its workers (pyproject's addopts:
``--dist loadgroup --no-loadscope-reorder``): a file's tests stay on one worker, where its
module-scoped fixtures and JAX's compiled programs are built once, except in the files of
:data:`SPREAD`, whose tests are units of their own; and the slowest work is handed out
first (:data:`SLOWEST_FIRST`), so that no worker is left with a long file at the end while
the other one idles.
"""

import os

import pytest

# The suite runs on the CPU even where the gpu extra is installed: its exact values (and the
# reports' bytes) are the CPU's, and processes it starts share no GPU memory. Set
# JAX_PLATFORMS=cuda (or "") to run it on an accelerator on purpose.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("MPLBACKEND", "Agg")

import jax

jax.config.update("jax_num_cpu_devices", 8)
# Broadcasting (n,) against (m, n) silently is how shape bugs hide; make it raise.
jax.config.update("jax_numpy_rank_promotion", "raise")

#: Test files from the slowest down, as ``--durations`` measured them on 2 cores (seconds of
#: wall time summed per file): notebooks 140, signals 100, painter 65, compile_cache 45,
#: report_flags 40, profile 35, engine, resnet, sweep, pipeline_numerics, pipeline and
#: compare 20-25 each, hostile 20, tradeoff 17, parameter_server, variability and jobs 13,
#: layers 12, numerics, bands and tie_order 10. The rest take a few seconds each and run
#: after these.
SLOWEST_FIRST = (
    "test_notebooks",
    "test_signals",
    "test_painter",
    "test_compile_cache",
    "test_report_flags",
    "test_profile",
    "test_engine",
    "test_resnet",
    "test_sweep",
    "test_pipeline_numerics",
    "test_pipeline",
    "test_compare",
    "test_hostile",
    "test_tradeoff",
    "test_parameter_server",
    "test_variability",
    "test_jobs",
    "test_layers",
    "test_numerics",
    "test_bands",
    "test_tie_order",
)
#: Files whose slow tests each run whole programs of their own (a notebook in its kernel, a
#: ``simdist run`` process, a lowered full-size model) and share no module-scoped fixture:
#: each test is a unit of work, so both workers take a share of them.
SPREAD = frozenset(
    {
        "test_notebooks",
        "test_signals",
        "test_report_flags",
        "test_profile",
        "test_engine",
        "test_pipeline_numerics",
        "test_compare",
        "test_layers",
    }
)


def pytest_configure(config: pytest.Config) -> None:
    # Appended after pyproject's filterwarnings, so it takes precedence: any warning
    # (not only DeprecationWarning) attributed to a simdist module fails the test.
    config.addinivalue_line("filterwarnings", "error::Warning:simdist(\\..*)?$")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Order the tests slowest file first (a file's tests keep their order) and, under
    ``--dist loadgroup``, put each file's tests in one group unless the file is in SPREAD.

    Every worker collects the same order: it depends on the file names only.
    """
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))
    if not getattr(config.option, "loadgroup", False):  # set on xdist's workers by xdist
        return
    for item in items:
        if item.path.stem not in SPREAD:
            item.add_marker(pytest.mark.xdist_group(item.path.stem))
