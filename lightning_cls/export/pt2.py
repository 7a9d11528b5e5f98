"""torch.export ``.pt2`` programs with a dynamic batch dimension: the modern TorchScript.

A ``.pt2`` holds an ``ExportedProgram`` (an ATen graph + weights); ``torch.export.load``
brings it back without the model's Python code. ``meta.json`` travels inside as an extra file.
"""

from __future__ import annotations

import torch

from lightning_cls.export.writer import Writer
from lightning_cls.inference.spec import META_FILE


class Pt2Writer(Writer):
    """``model.pt2``: ``torch.export.export`` of the network in eval mode, batch axis dynamic
    (any size >= 1), ``meta.json`` inside; read back by ``torch.export.load``."""

    key, file, title = "pt2", "model.pt2", "torch.export"

    def write(self, net, example, tmp, spec):
        batch = torch.export.Dim("batch", min=1)
        program = torch.export.export(net, (example,), dynamic_shapes=({0: batch},))
        torch.export.save(program, str(tmp), extra_files={META_FILE: spec.to_json()})
