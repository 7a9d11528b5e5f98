"""ExecuTorch export (``export=executorch``): a ``.pte`` program lowered to XNNPACK.

``torch.export`` captures the network (batch axis dynamic up to ``max_batch``),
``to_edge_transform_and_lower`` hands every operator XNNPACK supports to that CPU backend
(ExecuTorch's recommended path for Arm and x86 CPUs) and ``to_executorch`` plans memory and
serializes the program. The ``InputSpec`` travels inside as the constant method ``meta_json``
(``inference.executorch``), as TorchScript and ``.pt2`` carry ``meta.json``. The skeleton
(``export.writer``) reads the file back through ``ExecuTorchRuntime`` and checks it against
eager PyTorch.
"""

from __future__ import annotations

import torch

from lightning_cls.export.writer import Writer
from lightning_cls.inference.executorch import MAX_BATCH_METHOD, META_METHOD

MAX_BATCH = 64  # ExecuTorch plans buffers for this batch; larger ones run in chunks


class ExecuTorchWriter(Writer):
    """``model.pte``: XNNPACK-delegated, fp32, spec inside; read back by ExecuTorch."""

    key, file, title = "executorch", "model.pte", "ExecuTorch (XNNPACK)"
    modules = ("executorch",)
    extra = "executorch"

    def __init__(self, max_batch: int = MAX_BATCH):
        if not isinstance(max_batch, int) or max_batch < 1:
            raise ValueError(f"max_batch={max_batch!r}; use a positive integer (e.g. 64).")
        self.max_batch = max_batch

    def write(self, net, example, tmp, spec):
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        from executorch.exir import to_edge_transform_and_lower

        # Exported at max_batch itself: the memory plan is sized by the example's batch.
        example = self.example(spec, self.max_batch)
        batch = torch.export.Dim("batch", min=1, max=self.max_batch)
        program = torch.export.export(net, (example,), dynamic_shapes=({0: batch},))
        meta = torch.frombuffer(bytearray(spec.to_json().encode()), dtype=torch.uint8)
        constants = {META_METHOD: meta, MAX_BATCH_METHOD: self.max_batch}
        lowered = to_edge_transform_and_lower(
            program, partitioner=[XnnpackPartitioner()], constant_methods=constants
        )
        tmp.write_bytes(lowered.to_executorch().buffer)  # tmp: the skeleton's temp name
