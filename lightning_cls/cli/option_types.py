"""Checks of settings that would otherwise fail deep inside a library, without their key.

``optimizer.lr=abc`` reaches ``torch.optim.SGD`` as the string ``'abc'`` (a config has no
types) and fails at the first step with ``'<=' not supported between instances of 'float'
and 'str'``; here it fails before training with a line that names ``optimizer.lr``.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any


def check_option_types(factory: Any, key: str) -> None:
    """Raise a ``TypeError`` naming ``<key>.<option>`` when a partial from the config (an
    optimizer, a scheduler) got text for an option whose default is a number or a boolean."""
    if not isinstance(factory, functools.partial):
        return
    try:
        parameters = inspect.signature(factory.func).parameters
    except (TypeError, ValueError):  # a builtin without a signature: nothing to compare with
        return
    for option, value in factory.keywords.items():
        default = getattr(parameters.get(option), "default", None)
        if not isinstance(value, str) or not isinstance(default, (bool, int, float)):
            continue
        kind = "true or false" if isinstance(default, bool) else "a number"
        example = str(default).lower() if isinstance(default, bool) else default
        raise TypeError(
            f"{key}.{option}={value!r} is not {kind}; set {key}.{option} to {kind} "
            f"(its default is {key}.{option}={example})."
        )
