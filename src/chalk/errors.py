"""Typed errors. The CLI maps every ChalkError to one line on stderr and exit code 2."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable


def _natural(name: str) -> list:
    """Sort key reading digit runs as numbers: versions list 0.5, 0.6, 0.11, not 0.11, 0.5."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(name))]


class ChalkError(Exception):
    """Base class for every error chalk raises on bad input."""


class UnknownNameError(ChalkError, KeyError):
    """A catalog id (chip, system, model, precision, price sheet, ...) that does not exist."""

    def __init__(self, kind: str, name: str, choices: Iterable[str], known: Iterable[str] | None = None):
        """`choices`: every accepted spelling (ids and aliases), searched for suggestions;
        `known`: what to list (the ids; default: the choices)."""
        self.kind, self.name = kind, name
        self.choices = sorted(set(choices))
        close = difflib.get_close_matches(str(name).lower(), self.choices, n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        listed = sorted(set(known) if known is not None else self.choices, key=_natural)
        shown = ", ".join(listed[:16]) + (" ..." if len(listed) > 16 else "")
        super().__init__(f"unknown {kind} '{name}'{hint} (known: {shown})")

    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0]


class SpecError(ChalkError):
    """A malformed, missing or incomplete spec file (YAML or config.json)."""


class UnsupportedArchitectureError(SpecError):
    """A config.json whose model_type chalk does not know how to size."""


class InputError(ChalkError, ValueError):
    """A non-physical or out-of-range argument (batch 0, negative context, NaN, ...)."""


class FitError(ChalkError):
    """The model does not fit in memory when fitting was required."""


class MissingExtraError(ChalkError):
    """An optional dependency (an extra) is not installed."""
