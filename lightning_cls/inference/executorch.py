"""ExecuTorch runtime for ``.pte`` programs written by ``export=executorch``.

A ``.pte`` holds the network lowered to XNNPACK (ExecuTorch's CPU backend) plus two constant
methods the exporter adds: ``meta_json`` (the ``InputSpec`` as UTF-8 JSON bytes, a uint8
tensor: a program's methods return tensors and scalars only) and ``max_batch`` (the largest
batch its memory plan holds; ExecuTorch plans every buffer ahead, so a larger batch is run in
chunks of ``max_batch``). ``executorch.runtime`` imports torch, so this runtime takes and gives
tensors.
"""

from __future__ import annotations

import json
from pathlib import Path

from lightning_cls.inference.artifact_checks import unreadable_as
from lightning_cls.inference.runtimes import Runtime, split_outputs
from lightning_cls.inference.spec import META_FILE, merge_spec

META_METHOD = "meta_json"  # the spec, as a uint8 tensor of JSON bytes
MAX_BATCH_METHOD = "max_batch"


class ExecuTorchRuntime(Runtime):
    """A ``.pte`` program run by ExecuTorch's Python runtime (XNNPACK delegate, CPU)."""

    kind = "executorch"

    def __init__(
        self, path, *, spec=None, threads=None, device="cpu", model_name=None, model_kwargs=None
    ):
        try:
            from executorch.runtime import Runtime as EtRuntime
        except ImportError as err:
            raise ImportError(
                f"{Path(path).name} is an ExecuTorch program; install its runtime with "
                "pip install 'lightning_cls[executorch]'."
            ) from err
        path = Path(path)
        self.device = "cpu"
        if threads:  # XNNPACK's pool is process-wide, like PyTorch's
            from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool

            _unsafe_reset_threadpool(int(threads))
        with unreadable_as(path, "an ExecuTorch .pte program"):
            program = EtRuntime.get().load_program(path)
            self.method = program.load_method("forward")
        names = set(program.method_names)
        stored = None
        if META_METHOD in names:
            raw = program.load_method(META_METHOD).execute([])[0]
            stored = json.loads(bytes(raw.numpy()).decode())
        self.max_batch = 0
        if MAX_BATCH_METHOD in names:
            self.max_batch = int(program.load_method(MAX_BATCH_METHOD).execute([])[0])
        self.spec = merge_spec(stored, spec, f"{path.name} ({META_METHOD} inside, as {META_FILE})")
        # What the program answers, not what the spec asks: a second output is the features
        # (a rule given as an override to a file written without them is refused by Predictor).
        self.gives_features = program.metadata("forward").num_outputs() > 1

    def __call__(self, x):
        return self.outputs(x)[0]

    def outputs(self, x):
        import torch

        x = x.float().contiguous()
        step = self.max_batch or len(x)
        parts = [split_outputs(tuple(self.method.execute([c]))) for c in x.split(step)]
        logits = torch.cat([p[0] for p in parts])
        features = None if parts[0][1] is None else torch.cat([p[1] for p in parts])
        return logits, features
