"""Checks of settings that would otherwise fail deep inside a library, without their key.

``optimizer.lr=abc`` reaches ``torch.optim.SGD`` as the string ``'abc'`` (a config has no
types) and fails at the first step with ``'<=' not supported between instances of 'float'
and 'str'``; here it fails before training with a line that names ``optimizer.lr``.
``check_annotated_types`` does the same from a signature's annotations (``trainer.*``: the
Trainer's defaults are mostly None, its annotations say what it takes).
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
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


def check_annotated_types(func: Any, options: dict, key: str) -> None:
    """Raise a ``TypeError`` naming ``<key>.<option>`` when ``options`` (a config node, e.g.
    ``trainer``) gives text for a parameter of ``func`` annotated as numbers or booleans only:
    ``trainer.max_epochs=abc`` otherwise ends in a bare ``AssertionError`` inside Lightning."""
    try:
        hints = typing.get_type_hints(func)
    except Exception:  # noqa: BLE001 - an annotation that does not resolve: nothing to compare
        return
    for option, value in options.items():
        if not isinstance(value, str) or option not in hints:
            continue
        kinds = _kinds(hints[option])
        if str in kinds or object in kinds or not kinds & {bool, int, float}:
            continue
        kind = (
            "true or false" if kinds & {int, float} == set()
            else "a number" if float in kinds
            else "an integer"
        )  # fmt: skip
        null = " or null" if type(None) in kinds else ""
        raise TypeError(
            f"{key}.{option}={value!r} is not {kind}; set {key}.{option} to {kind}{null}."
        )


def _kinds(hint: Any) -> set[type]:
    """The plain types ``hint`` allows (a Union's, an Optional's, a Literal's values' types);
    ``object`` for what cannot be told (Any, a type variable)."""
    origin = typing.get_origin(hint)
    if origin is typing.Union or isinstance(hint, types.UnionType):
        return set().union(*(_kinds(arg) for arg in typing.get_args(hint)))
    if origin is typing.Literal:
        return {type(arg) for arg in typing.get_args(hint)}
    if hint is type(None):
        return {type(None)}
    if isinstance(hint, type):
        return {hint}
    return {origin} if isinstance(origin, type) else {object}
