"""The one rule for flags that let a file run code when it is loaded (``trust_artifact``,
``serve.trust_artifact``, ``distill.trust_teacher``): a real boolean, nothing that merely looks
like one.

Hydra reads ``trust_artifact=true`` as ``True`` but ``trust_artifact=no`` as the string
``"no"`` and ``trust_artifact=1`` as the integer 1. ``bool("no")`` and ``bool("false")`` are
true, so a coercion would turn a user's "no" into trust. Every such flag is read through
``check_trust_flag``; anything but ``True``/``False`` is refused in one line naming the key, the
value and the fix. Light: no torch, no Hydra.
"""

from __future__ import annotations

from typing import Any


def check_trust_flag(key: str, value: Any) -> bool:
    """``value`` when it is ``True`` or ``False`` itself; a ``TypeError`` naming ``key``, the
    value and the fix for anything else (``"no"``, ``"off"``, ``"false"``, ``1``, ``None``)."""
    if value is True or value is False:
        return value
    raise TypeError(
        f"{key}={value!r} is not a boolean; a file that can run code when loaded is trusted "
        f"only by {key}=true, so set {key}=true (you trust its source) or {key}=false."
    )
