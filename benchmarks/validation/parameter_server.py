"""Validation cases: parameter server (see validation/__init__.py for the rules)."""

from __future__ import annotations

from validation import Case

TITLE = "parameter server"
TEXT = ""
CASES: list[Case] = []
