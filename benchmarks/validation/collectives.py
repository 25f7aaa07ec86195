"""Validation cases: collectives (see validation/__init__.py for the rules)."""

from __future__ import annotations

from validation import Case

TITLE = "collectives"
TEXT = ""
CASES: list[Case] = []
