"""Strict test set-up, after Equinox's conftest: 8 emulated CPU devices, x64 off, no implicit
rank promotion, and every warning raised from simdist's own code is an error."""

import os

import pytest

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("MPLBACKEND", "Agg")

import jax

jax.config.update("jax_num_cpu_devices", 8)
# Broadcasting (n,) against (m, n) silently is how shape bugs hide; make it raise.
jax.config.update("jax_numpy_rank_promotion", "raise")


def pytest_configure(config: pytest.Config) -> None:
    # Appended after pyproject's filterwarnings, so it takes precedence: any warning
    # (not only DeprecationWarning) attributed to a simdist module fails the test.
    config.addinivalue_line("filterwarnings", "error::Warning:simdist(\\..*)?$")
