"""``frozen_by_design``: a parameter a network freezes as part of its architecture.

airbench's whitening filters (set from the data, never trained) and its BatchNorm scales (held
at 1) are frozen on purpose. Marking them tells checks that warn about frozen parameters
(``UnusedParameterFinder``) that nothing was lost; a parameter the user freezes stays unmarked.
"""

from __future__ import annotations

from torch import nn

FROZEN_BY_DESIGN = "frozen_by_design"  # the attribute set on the parameter


def frozen_by_design(param: nn.Parameter) -> nn.Parameter:
    """Freeze ``param`` (``requires_grad=False``), marked as frozen by the network's design."""
    param.requires_grad_(False)
    setattr(param, FROZEN_BY_DESIGN, True)
    return param


def is_frozen_by_design(param: nn.Parameter) -> bool:
    return bool(getattr(param, FROZEN_BY_DESIGN, False))
