"""What several scenario sections share: the one-string shorthand and the size limits.

A section written as a bare string stands for its key (``strategy: mirrored`` is
``strategy: {kind: mirrored}``, :data:`~simdist.scenario.messages.SHORTHAND_KEYS`), and
the limits below bound what one process is asked to build, each refused at load time by
the section that meets it with the limit in the message.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = [
    "MAX_DEVICES",
    "MAX_GENERATED_EXAMPLES",
    "MAX_GENERATED_VALUES",
    "MAX_NAME_CHARS",
    "MAX_PS_TASKS",
    "MAX_RUNS",
    "shorthand",
]

# A report folder's name (the scenario's, a job's) is short enough that the temporary
# folder beside it (".NAME.tmp.<host>.<pid>.<random>") fits a file name.
MAX_NAME_CHARS = 100
# What one process can hold and simulate: beyond these the run would exhaust memory or
# never finish, so they are refused at load time with the limit in the message.
MAX_DEVICES = 65_536
MAX_PS_TASKS = 4_096
#: The most runs one call may ask for (the seeds of a compare, the points of a sweep): each
#: is a whole simulation, so 10⁶ would run for weeks; refused before any work, so that a
#: mistyped count is an error at once instead of a silent hang.
MAX_RUNS = 10_000
MAX_GENERATED_EXAMPLES = 10_000_000
MAX_GENERATED_VALUES = 50_000_000  # n_examples x n_features: 400 MB as float64 while drawn


def shorthand(key: str) -> Callable[[object], object]:
    """Let ``strategy: mirrored`` stand for ``strategy: {kind: mirrored}`` (and similar)."""

    def expand(value: object) -> object:
        return {key: value} if isinstance(value, str) else value

    return expand
