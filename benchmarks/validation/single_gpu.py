"""Validation cases: single gpu (see validation/__init__.py for the rules)."""

from __future__ import annotations

from validation import Case

TITLE = "single gpu"
TEXT = ""
CASES: list[Case] = []
