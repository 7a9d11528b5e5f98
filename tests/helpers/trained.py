"""Models trained once per test process with the tiny recipe, for tests that only read them.

``trained_model`` is a SimpleCNN fit on ``LEARNABLE`` data (the ``trained`` fixture: export,
inference and examples tests); ``trained_artifacts`` a flip+translate-TTA SimpleCNN with its
checkpoint, bare weights and exports (the ``artifacts`` fixture: inference and serve tests).
Each is built on first use and the same object is returned after that, whichever fixture asks,
so no two test folders train the same model: a test must not change what it is given.
"""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from helpers.tiny import LEARNABLE, as_overrides, fit, make_data, make_module, make_trainer
from lightning_cls.data import SyntheticDataModule
from lightning_cls.inference import TTA, InputSpec
from lightning_cls.module import ClassificationModule

_BUILT: dict[tuple, object] = {}

# ``trained_model``'s recipe: LEARNABLE data (here as Hydra overrides, for commands that must
# see what it learned, e.g. INT8 calibration) and a SimpleCNN this wide.
TRAINED_OVERRIDES = as_overrides(LEARNABLE)


def make_untrained(data: SyntheticDataModule) -> ClassificationModule:
    """A fresh SimpleCNN as wide as ``trained_model``'s: its outputs differ, its shapes match."""
    return make_module(data, widths=[8, 16], hidden=32)


@dataclass
class Trained:
    ckpt: Path
    module: ClassificationModule
    data: SyntheticDataModule
    spec: InputSpec

    @property
    def net(self) -> torch.nn.Module:
        return self.module.net.eval()


@dataclass
class Artifacts:
    module: ClassificationModule
    spec: InputSpec
    paths: dict[str, Path]  # kind -> file
    images: torch.Tensor  # uint8 (N, 3, 12, 12) validation images


def trained_model(root: Path) -> Trained:
    """A SimpleCNN ([8, 16] wide) trained 4 epochs on LEARNABLE data; checkpoint in ``root``."""
    if "model" not in _BUILT:
        with _one_thread():
            torch.manual_seed(0)
            data = make_data(LEARNABLE)
            module = make_untrained(data)
            ckpt = fit(module, data, root)
        _BUILT["model"] = Trained(ckpt, module.eval(), data, InputSpec.from_hparams(module.hparams))
    return _BUILT["model"]


def trained_artifacts(root: Path, tta_flip: bool = True, tta_translate: int = 1) -> Artifacts:
    """A 3-class SimpleCNN trained one epoch with TTA on; its .ckpt, weights and exports."""
    key = ("artifacts", tta_flip, tta_translate)
    if key not in _BUILT:
        with _one_thread():
            _BUILT[key] = _build_artifacts(Path(root), tta_flip, tta_translate)
    return _BUILT[key]


def _build_artifacts(root: Path, tta_flip: bool, tta_translate: int) -> Artifacts:
    from lightning_cls.export.exporter import ExportConfig, export_model
    from lightning_cls.inference.network import network_state_dict

    torch.manual_seed(0)
    data = make_data(
        num_classes=3, num_channels=3, image_size=12, train_size=96, test_size=16, val_size=32
    )
    tta = TTA(flip=tta_flip, translate=tta_translate)
    module = make_module(data, module_kwargs={"tta": tta})
    trainer = make_trainer(root, limit_val_batches=0)
    trainer.fit(module, datamodule=data)
    ckpt = root / "model.ckpt"
    trainer.save_checkpoint(ckpt)
    module.eval()
    weights = root / "weights" / "model_weights.pt"
    weights.parent.mkdir()
    torch.save(network_state_dict(module.state_dict()), weights)
    plain = (str, int, float, bool, list, dict, type(None))
    hparams = {k: v for k, v in module.hparams.items() if isinstance(v, plain)}
    weights.with_suffix(".json").write_text(json.dumps(hparams))
    spec = InputSpec.from_hparams(module.hparams)
    config = ExportConfig(formats=["onnx", "torchscript", "pt2"], torchscript={"modes": ["trace"]})
    exported = export_model(module.net, spec, root / "export", config).paths
    paths = {
        "ckpt": ckpt,
        "weights": weights,
        "onnx": exported["onnx"],
        "torchscript": exported["torchscript_trace"],
        "pt2": exported["pt2"],
    }
    return Artifacts(module, spec, paths, data.splits["val"].images[:16].clone())


def png_bytes(image: torch.Tensor) -> bytes:
    """uint8 (C, H, W) -> PNG file bytes (lossless, so decoding gives the same pixels)."""
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(image.permute(1, 2, 0).numpy())).save(buf, "PNG")
    return buf.getvalue()


@contextlib.contextmanager
def _one_thread():
    """Train with one intra-op thread whatever the caller set (same numbers on every machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def ask_server(path, images) -> list[dict]:
    """Each uint8 (C, H, W) image of ``images`` as a PNG to ``POST /predict`` of an in-process
    ``ServeApp`` serving ``path``: the first prediction of each answer (the app closed after)."""
    import asyncio

    import httpx

    from lightning_cls.inference import load_artifact
    from lightning_cls.serve.app import ServeApp
    from lightning_cls.serve.config import ServeConfig
    from lightning_cls.serve.metrics import ServeMetrics

    app = ServeApp(ServeConfig(artifact=str(path)), load_artifact(path), ServeMetrics(), {})
    bodies = []
    for image in images:  # uint8 (C, H, W); a grey image is saved as mode L
        pixels = np.ascontiguousarray(image.permute(1, 2, 0).numpy())
        buffer = io.BytesIO()
        Image.fromarray(pixels[..., 0] if pixels.shape[2] == 1 else pixels).save(buffer, "PNG")
        bodies.append(buffer.getvalue())

    async def ask():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            headers = {"content-type": "image/png"}
            return [await client.post("/predict", content=b, headers=headers) for b in bodies]

    try:
        return [answer.json()["predictions"][0] for answer in asyncio.run(ask())]
    finally:
        app.close()
