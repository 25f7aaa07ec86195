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
