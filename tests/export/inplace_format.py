"""The kill test's negative control: an export format whose writer writes IN PLACE.

``InPlaceWriter`` writes its ``.inplace`` file (an ``.npz`` of the network) straight under its
final name, slowly (chunk by chunk, ~2 s), before handing the skeleton a copy at the temp
name: the bug ``fileio`` exists to prevent. A kill during those seconds leaves a truncated file
under a final name, which ``InPlaceRuntime`` cannot load. ``tests/export/test_kill_export.py``
must catch it.

Run as a script it is ``python -m lightning_cls.export`` with the format registered:
``python tests/export/inplace_format.py ckpt_path=... export.formats=[inplace] ...``.
Imported, ``register()`` registers the runtime (so ``load_artifact`` opens ``.inplace`` files)
and ``unregister()`` removes it.
"""

from __future__ import annotations

import io
import sys
import time

import numpy as np
import torch

from lightning_cls.export import FORMATS, Writer, register_format
from lightning_cls.inference.network import build_network
from lightning_cls.inference.runtimes import RUNTIMES, Runtime, register_runtime
from lightning_cls.inference.spec import InputSpec

SPEC_KEY = "__spec__"
CHUNKS, PAUSE_S = 40, 0.05  # ~2 s of writing under the final name


class InPlaceRuntime(Runtime):
    kind = "inplace"

    def __init__(
        self, path, *, spec=None, threads=None, device="cpu", model_name=None, model_kwargs=None
    ):
        self.device = torch.device("cpu")
        with open(path, "rb") as f, np.load(f) as archive:  # a truncated zip: BadZipFile
            self.spec = InputSpec.from_json(str(archive[SPEC_KEY]))
            state = {k: torch.from_numpy(archive[k]) for k in archive.files if k != SPEC_KEY}
        self.net = build_network(self.spec.model_name, self.spec.model_kwargs, self.spec.classes)
        self.net.load_state_dict(state)
        self.net.eval()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class InPlaceWriter(Writer):
    key, file, title = "inplace", "model.inplace", "in-place NumPy"

    def write(self, net, example, tmp, spec):
        buffer = io.BytesIO()
        arrays = {k: v.detach().cpu().numpy() for k, v in net.state_dict().items()}
        np.savez(buffer, **{SPEC_KEY: np.array(spec.to_json())}, **arrays)
        data = buffer.getvalue()
        step = -(-len(data) // CHUNKS)
        with open(tmp.parent / self.file, "wb") as final:  # THE BUG: the final name, in place
            for start in range(0, len(data), step):
                final.write(data[start : start + step])
                final.flush()
                time.sleep(PAUSE_S)
        tmp.write_bytes(data)  # what the skeleton reads back and renames


def register() -> None:
    """Register the runtime and the format (``unregister`` takes them out again)."""
    if ".inplace" not in RUNTIMES:
        register_runtime(".inplace", InPlaceRuntime)
    if "inplace" not in FORMATS:
        register_format("inplace", InPlaceWriter)


def unregister() -> None:
    """Leave the registries as they were: other tests in the process list the formats."""
    FORMATS.pop("inplace", None)
    RUNTIMES.pop(".inplace", None)


if __name__ == "__main__":
    register()
    from lightning_cls.cli import run_cli
    from lightning_cls.export.__main__ import main

    sys.argv[0] = "lightning_cls.export"
    run_cli(main)
