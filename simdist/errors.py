"""The errors simdist reports to its users (exit status 2, no traceback)."""

from __future__ import annotations


class SimdistError(Exception):
    """An error meant for the user: the CLI prints it and exits with status 2."""


class ScenarioError(SimdistError):
    """Bad scenario input: which file, which field, what was wrong, what is accepted."""

    def __init__(self, source: str, field: str, message: str) -> None:
        self.source = source
        self.field = field
        self.message = message
        where = f"{source}: {field}" if field else source
        super().__init__(f"{where}: {message}")


class DataError(SimdistError):
    """What a scenario points to is unusable: a data file (``npz``, ``init_from``), or a
    model too large for this machine.

    ``path`` names the file (or the model); ``field`` is the scenario field that named it
    (``workload.dataset.npz``), so the caller that knows the scenario's own file can report
    all three: :meth:`in_scenario` makes that :class:`ScenarioError`.
    """

    def __init__(self, path: str, field: str, message: str) -> None:
        self.path = path
        self.field = field
        self.message = message
        # The three arguments, so that a copy made from them (SimPy re-raises a process's
        # exception as ``type(e)(*e.args)``; pickle does the same) is the same error.
        super().__init__(path, field, message)

    def __str__(self) -> str:
        return f"{self.field}: {self.path}: {self.message}"

    def in_scenario(self, source: str) -> ScenarioError:
        """The same error as one of the scenario file ``source``."""
        return ScenarioError(source, self.field, f"{self.path}: {self.message}")


class DeviceFallbackWarning(UserWarning):
    """The numerics run on emulated CPU devices because the accelerator has too few for
    ``execution: devices`` (:func:`simdist.numerics.ensure_devices`); the CLI prints it
    once, as a ``warning:`` line, and Python shows it to API users."""
