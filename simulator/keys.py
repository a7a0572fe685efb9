"""Scenario keys: how a key is declared and checked, shared by the scenario's sections and by the keys each algorithm
declares in its record (:mod:`.algorithms`).

A key is a dataclass field whose metadata holds its :class:`Check`: the TOML types it accepts, a predicate, the words
that say what is allowed (they end every error message about it), and a conversion to the stored value. The scenario
loader walks these fields generically, so declaring a key is one line.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from stragglerlab.analysis.errors import UserError


class ScenarioError(UserError):
    """A scenario key with a bad value, an unknown key, or an unreadable scenario."""


def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class Check:
    """How one key is validated: a predicate over the parsed value and the words that say what is allowed."""

    kind: type | tuple[type, ...]
    ok: Callable[[Any], bool]
    allowed: str
    convert: Callable[[Any], Any] = _same  # raw TOML value -> stored value
    path: bool = False  # a file name, resolved relative to where the value came from


def key(default: Any, check: Check) -> Any:
    """A dataclass field with a default and its check."""
    return dataclasses.field(default=default, metadata={"check": check})


def number(ok: Callable[[float], bool], allowed: str) -> Check:
    """A finite integer or float for which ``ok`` holds, stored as a float."""
    return Check((int, float), lambda v: math.isfinite(v) and ok(v), allowed, float)


def at_most(most: int, shown: str) -> Check:
    """A positive integer up to ``most`` (``shown``: how the words say it, ``2^40``)."""
    return Check(int, lambda v: 0 < v <= most, f"a positive integer up to {shown}")


def one_of(choices: tuple[str, ...]) -> Check:
    return Check(str, lambda v: v in choices, "one of " + ", ".join(choices))


POSITIVE_INT = Check(int, lambda v: v > 0, "a positive integer")
NONNEG_INT = Check(int, lambda v: v >= 0, "an integer >= 0")
NONNEG = number(lambda v: v >= 0, "a number >= 0")
POSITIVE = number(lambda v: v > 0, "a number > 0")
FRACTION = number(lambda v: 0 <= v <= 1, "a number between 0 and 1")
BOOL = Check(bool, lambda v: True, "true or false")


@dataclass(frozen=True)
class Key:
    """A key of the ``[algorithm]`` table that an algorithm declares: its name, default, check and meaning (one
    line, for the docs and ``stragglerlab algorithms``). Algorithms that read the same key share one ``Key``."""

    name: str
    default: Any
    check: Check
    doc: str
