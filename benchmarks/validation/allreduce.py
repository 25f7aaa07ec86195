"""Validation cases: allreduce (see validation/__init__.py for the rules)."""

from __future__ import annotations

from validation import Case

TITLE = "allreduce"
TEXT = ""
CASES: list[Case] = []
