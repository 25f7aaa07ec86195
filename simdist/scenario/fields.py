"""What several scenario sections share: the one-string shorthand and the size limits.

A section written as a bare string stands for its key (``strategy: mirrored`` is
``strategy: {kind: mirrored}``, :data:`~simdist.scenario.messages.SHORTHAND_KEYS`), and
the limits below bound what one process is asked to build, each refused at load time by
the section that meets it with the limit in the message.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = [
    "GPT_CAPS",
    "MAX_DEVICES",
    "MAX_GENERATED_EXAMPLES",
    "MAX_GENERATED_VALUES",
    "MAX_MODEL_PARAMS",
    "MAX_NAME_CHARS",
    "MAX_PS_TASKS",
    "MAX_RUNS",
    "MAX_SEED",
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
#: The largest seed: the reports' tables (pandas) keep seeds as 64-bit signed integers, so
#: 2^64 (which numpy's SeedSequence would take) could not be written into them.
MAX_SEED = 2**63 - 1
MAX_GENERATED_EXAMPLES = 10_000_000
MAX_GENERATED_VALUES = 50_000_000  # n_examples x n_features: 400 MB as float64 while drawn
#: A model's parameters: 10^15 (4 PB of float32) is a thousand times the largest dense
#: models trained (about 10^12); past it the size is a typo, refused as the scenario loads
#: from the size's closed form (simdist.model_size), before anything is built.
MAX_MODEL_PARAMS = 10**15
#: The configurable gpt's sizes, each about a hundred times the largest published: layers
#: (1,000-layer transformers: Wang et al. 2022, DeepNet), positions (contexts of 10^5 to
#: 10^6 tokens) and vocabulary (about 2.6 x 10^5 tokens). Each: (cap, the largest seen, its
#: example value).
GPT_CAPS: dict[str, tuple[int, str, int]] = {
    "layers": (10**5, "about 1,000", 96),
    "seq_len": (10**7, "10^5 to 10^6", 2048),
    "vocab": (10**8, "about 256,000", 51200),
}


def shorthand(key: str) -> Callable[[object], object]:
    """Let ``strategy: mirrored`` stand for ``strategy: {kind: mirrored}`` (and similar)."""

    def expand(value: object) -> object:
        return {key: value} if isinstance(value, str) else value

    return expand
