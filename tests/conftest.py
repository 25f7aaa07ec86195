"""Strict test set-up, after Equinox's conftest: 8 emulated CPU devices, x64 off."""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("MPLBACKEND", "Agg")

import jax

jax.config.update("jax_num_cpu_devices", 8)
