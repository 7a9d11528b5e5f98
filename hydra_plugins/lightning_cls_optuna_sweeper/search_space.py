"""Hydra override grammar → Optuna distributions, and sampled values → override strings."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, Override, RangeSweep

if TYPE_CHECKING:  # Optuna is imported when a sweep runs: Hydra imports this module on every start
    from optuna.distributions import BaseDistribution

_PLAIN = re.compile(r"^[\w./:@+-]+$")  # values that need no quoting in an override


def distribution(override: Override) -> BaseDistribution:
    """The Optuna distribution of one sweep override (``choice``, ``range``, ``interval``)."""
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    value, key = override.value(), override.get_key_element()
    if isinstance(value, ChoiceSweep):
        return CategoricalDistribution(list(value.list))
    if isinstance(value, RangeSweep):  # Hydra's range excludes stop, like Python's
        items = list(override.sweep_iterator())
        if not items:
            raise ValueError(f"{key}: {override.input_line} is an empty range; widen it.")
        if all(isinstance(v, int) for v in items):
            return IntDistribution(items[0], items[-1], step=int(value.step))
        return FloatDistribution(items[0], items[-1], step=float(value.step))
    if isinstance(value, IntervalSweep):
        log = "log" in value.tags
        if isinstance(value.start, int) and isinstance(value.end, int):
            return IntDistribution(value.start, value.end, log=log)
        return FloatDistribution(float(value.start), float(value.end), log=log)
    raise ValueError(
        f"{key}: {override.input_line} is not a sweep the optuna sweeper understands; use "
        "choice(...), range(a, b[, step]), interval(a, b), int(interval(a, b)) or "
        "tag(log, interval(a, b))."
    )


def parse(
    lines: list[str], parser: OverridesParser
) -> tuple[list[str], dict[str, BaseDistribution]]:
    """Split ``key=value`` lines into fixed overrides and a search space (key → distribution)."""
    fixed, space = [], {}
    for override in parser.parse_overrides(lines):
        key = override.get_key_element()
        if override.is_sweep_override():
            space[key] = distribution(override)
        else:
            fixed.append(f"{key}={override.get_value_element_as_str()}")
    return fixed, space


def as_override(key: str, value: Any) -> str:
    """``key=value`` that Hydra parses back to ``value`` (strings quoted when needed)."""
    if isinstance(value, bool) or value is None:
        text = {True: "true", False: "false", None: "null"}[value]
    elif isinstance(value, (int, float)):
        text = repr(value)
    elif isinstance(value, str) and _PLAIN.match(value):
        text = value
    else:
        text = "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"
    return f"{key}={text}"
