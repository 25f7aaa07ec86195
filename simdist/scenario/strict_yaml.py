"""YAML as scenarios need it: a key given twice is an error, documents are bounded, and
``4:1`` is the text it looks like.

PyYAML's ``safe_load`` keeps the last of two equal keys without a word, recurses once per
nesting level (20,000 ``[`` end in ``RecursionError``), and lets aliases share one value
many times over, so a 1 KB "billion laughs" document walks as billions of values and a
self-referencing alias never ends. :func:`parse_yaml` refuses all of these with one
:class:`~simdist.errors.ScenarioError`, so the validation after it only sees plain,
finite, tree-shaped data.

YAML 1.1, which PyYAML follows, reads ``4:1`` unquoted as the base-60 number 241 (and
``1:30:00`` as 5400): ``oversubscription: 4:1`` would silently give a leaf-spine uplink a
241st of its bandwidth. :class:`CoreLoader` resolves integers and floats as PyYAML does
less the base-60 forms (which YAML 1.2 dropped), so ``4:1`` stays the string the field
parses.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from simdist.errors import ScenarioError

__all__ = ["MAX_DEPTH", "MAX_NODES", "CoreLoader", "parse_yaml"]

#: Deepest nesting of mappings and lists accepted (real scenarios nest about 5 deep).
MAX_DEPTH = 32
#: Most values a document may hold, aliases counted each time they are used.
MAX_NODES = 100_000

_MERGE = "tag:yaml.org,2002:merge"
_INT, _FLOAT = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"


class CoreLoader(yaml.SafeLoader):
    """SafeLoader whose integers and floats are PyYAML's without the base-60 forms."""


CoreLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in (_INT, _FLOAT)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
# PyYAML's own patterns (yaml/resolver.py) less their `(?::[0-5]?[0-9])+` alternatives.
CoreLoader.add_implicit_resolver(
    _INT,
    re.compile(
        r"""^(?:[-+]?0b[0-1_]+
        |[-+]?0[0-7_]+
        |[-+]?(?:0|[1-9][0-9_]*)
        |[-+]?0x[0-9a-fA-F_]+)$""",
        re.X,
    ),
    list("-+0123456789"),
)
CoreLoader.add_implicit_resolver(
    _FLOAT,
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?
        |\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


class _StrictLoader(CoreLoader):
    """SafeLoader that refuses a mapping key given twice (merge keys ``<<`` still merge)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE:
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node)
            except TypeError:
                continue  # an unhashable key: the base class reports it
            if first is not key_node:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found duplicate key {key!r} "
                    f"(first given at line {first.start_mark.line + 1})",
                    key_node.start_mark,
                )
        return super().construct_mapping(node, deep=deep)


def _check_size(data: Any, source: str, field: str) -> None:
    """Refuse data nested deeper than MAX_DEPTH or holding more than MAX_NODES values.

    Walks iteratively and stops at the first limit, so neither a cycle nor an alias bomb
    costs more than MAX_NODES visits.
    """
    stack: list[tuple[Any, int]] = [(data, 0)]
    count = 0
    while stack:
        value, depth = stack.pop()
        count += 1
        if count > MAX_NODES:
            raise ScenarioError(
                source,
                field,
                f"holds more than {MAX_NODES:,} values (aliases counted each time they are "
                "used); a scenario is a few dozen",
            )
        if isinstance(value, dict | list):
            if depth >= MAX_DEPTH:
                raise ScenarioError(
                    source,
                    field,
                    f"nested more than {MAX_DEPTH} levels deep (or an alias refers to itself); "
                    "a scenario nests about 5 levels",
                )
            children = value.values() if isinstance(value, dict) else value
            stack.extend((child, depth + 1) for child in children)


def parse_yaml(text: str, source: str, field: str = "") -> Any:
    """One YAML document as plain data, or one ScenarioError naming ``source`` (and ``field``).

    ``field`` is set when ``text`` is the value of one field (``--set a.b=text``).
    """
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader: no Python objects
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ScenarioError(source, field, f"not valid YAML{where}: {exc.problem}") from None
    except yaml.YAMLError as exc:
        raise ScenarioError(source, field, f"not valid YAML: {exc}") from None
    except RecursionError:
        raise ScenarioError(
            source, field, f"not valid YAML: nested too deeply (at most {MAX_DEPTH} levels)"
        ) from None
    except (ValueError, TypeError, OverflowError) as exc:
        # A scalar YAML resolves but cannot build, e.g. the date 2001-02-30.
        raise ScenarioError(source, field, f"not valid YAML: {exc}") from None
    _check_size(data, source, field)
    return data
