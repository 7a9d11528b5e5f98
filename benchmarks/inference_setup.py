"""Data, models and runtimes for ``benchmarks/inference.py`` (kept apart to stay readable)."""

from __future__ import annotations

import copy
import functools
import io
import logging
import tarfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch
from PIL import Image

from lightning_cls.data import ImageDataModule, Split, SyntheticDataModule
from lightning_cls.export import export_format
from lightning_cls.export.int8 import Int8Options
from lightning_cls.export.onnx import make_session, run_session
from lightning_cls.export.openvino import quantize_openvino_int8
from lightning_cls.export.quantize import SplitCalibrationReader, quantize_onnx_static
from lightning_cls.export.torchscript import load_torchscript, quiet_jit
from lightning_cls.export.writer import ExportData
from lightning_cls.inference import InputSpec, load_torch_model
from lightning_cls.inference.openvino import compile_model
from lightning_cls.inference.runtimes import open_runtime
from lightning_cls.module import ClassificationModule
from lightning_cls.training.optim import one_cycle

log = logging.getLogger("benchmark")


class ArrayDataModule(ImageDataModule):
    """In-memory uint8 splits (here: CIFAR-10 decoded from the shared JPEG archive)."""

    def __init__(self, splits: dict[str, Split], classes: list[str], source: str, **kwargs):
        super().__init__(**kwargs)
        self._given, self.classes, self.source = splits, classes, source
        self.num_channels, self.image_size = (
            splits["train"].images.shape[1],
            splits["train"].images.shape[-1],
        )
        x = splits["train"].images.float().div(255)  # (N, C, H, W)
        self.mean = tuple(x.mean((0, 2, 3)).tolist())
        self.std = tuple(x.std((0, 2, 3)).tolist())

    def load_splits(self) -> dict[str, Split]:
        return dict(self._given)


def read_image_folder_tar(
    path: Path, per_class: int | None
) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """``train/<class>/<n>.jpg`` members -> uint8 (N, C, H, W), labels (N,), sorted classes."""
    items: dict[str, list[torch.Tensor]] = {}
    with tarfile.open(path, "r:*") as tar:
        for member in tar:
            parts = Path(member.name).parts
            if not member.isfile() or len(parts) < 2 or not member.name.endswith(".jpg"):
                continue
            images = items.setdefault(parts[-2], [])
            if per_class is not None and len(images) >= per_class:
                continue
            with Image.open(io.BytesIO(tar.extractfile(member).read())) as img:
                images.append(torch.from_numpy(np.asarray(img.convert("RGB"))).permute(2, 0, 1))
    classes = sorted(items)
    images = torch.stack([im for c in classes for im in items[c]])
    labels = torch.tensor([i for i, c in enumerate(classes) for _ in items[c]])
    return images, labels, classes


def load_data(args) -> ArrayDataModule | SyntheticDataModule:
    per_class = 250 if args.quick else None
    val_size = 64 if args.quick else 5000
    batch_size = 32 if args.quick else 128
    kwargs = dict(batch_size=batch_size, augment="crop_flip", val_size=val_size, seed=0)
    if args.data.is_file():
        cache = args.out_dir / f"cifar10_{per_class or 'all'}.pt"
        if cache.is_file():
            images, labels, classes = torch.load(cache, weights_only=True).values()
        else:
            log.info("Decoding %s ...", args.data)
            images, labels, classes = read_image_folder_tar(args.data, per_class)
            cache.parent.mkdir(parents=True, exist_ok=True)
            torch.save({"images": images, "labels": labels, "classes": classes}, cache)
        source = f"CIFAR-10 JPEG {args.data.name}: {len(labels) - val_size} train / {val_size} val"
        dm = ArrayDataModule({"train": Split(images, labels)}, classes, source, **kwargs)
    else:
        log.warning(
            "%s not found: FALLING BACK TO SYNTHETIC DATA (accuracies are not CIFAR-10's)",
            args.data,
        )
        # --quick: 16 x 16 images, 64 to train on (2 steps) and 64 to validate (a smoke run).
        sizes = dict(image_size=16, train_size=128, test_size=16) if args.quick else {}
        dm = SyntheticDataModule(
            num_classes=10, **({"train_size": 20000, "test_size": 100} | sizes), **kwargs
        )
        dm.source = "SYNTHETIC (CIFAR-10 archive not found)"
    dm.setup("fit")
    return dm


def prepare_model(name: str, data, args) -> tuple[torch.nn.Module, InputSpec, Path]:
    """Load ``--ckpt-<name>`` or train ``name`` briefly (SGD + one-cycle, crop + flip)."""
    ckpt = getattr(args, f"ckpt_{name}")
    if ckpt is None:
        epochs = getattr(args, f"epochs_{name}")
        module = ClassificationModule(
            model_name=name,
            model_kwargs=dict(
                num_classes=data.num_classes,
                in_channels=data.num_channels,
                image_size=data.image_size,
            ),
            optimizer=functools.partial(
                torch.optim.SGD, lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4
            ),
            scheduler=functools.partial(one_cycle, pct_start=0.25),
            spec=data.spec,
        )
        trainer = pl.Trainer(
            accelerator="cpu",
            devices=1,
            max_epochs=epochs,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
            limit_train_batches=2 if args.quick else getattr(args, f"train_fraction_{name}"),
            precision=args.train_precision,
        )
        log.info("Training %s for %d epoch(s) on %s", name, epochs, data.source)
        trainer.fit(module, datamodule=data)
        ckpt = args.out_dir / f"{name}.ckpt"
        trainer.save_checkpoint(ckpt)
        log.info("Saved %s; reuse it with --ckpt-%s %s", ckpt, name, ckpt)
    net, meta = load_torch_model(ckpt)
    return net, meta, ckpt


def _no_grad(fn: Callable) -> Callable:
    @functools.wraps(fn)
    def run(x: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            return fn(x)

    return run


# Every PyTorch way to run the trained net on CPU; speed-ups are quoted against the best of them.
PYTORCH = ("eager", "eager_channels_last", "torch_compile", "torchscript")
# Exported runtimes: name -> the fp32 runtime its int8 speed-up is measured against.
EXPORTED = {
    "ort_fp32": None,
    "ort_int8_qdq": "ort_fp32",
    "ort_int8_qoperator": "ort_fp32",
    "ov_f32": None,
    "ov_bf16": None,
    "ov_int8": "ov_f32",
    "executorch": None,  # export=executorch: XNNPACK .pte (the `executorch` extra)
    "litert": None,  # export=litert: .tflite (make venv-litert converts; ai-edge-litert runs)
    "litert_int8": "litert",  # export=litert_int8: PT2E INT8 .tflite, gated against litert's
}


def runtimes(
    net, meta: InputSpec, data, out: Path, threads: int, calibration_batches: int, only=None
) -> dict[str, Callable]:
    """name -> fn(normalized float (B, C, H, W)) -> logits, for every runtime that builds here
    (or only those named in ``only``; an int8 runtime builds its fp32 file first)."""
    out.mkdir(parents=True, exist_ok=True)
    net = net.eval()
    onnx = out / "model.onnx"
    xml = out / "model.xml"
    train = data.splits["train"]

    def reader():
        return SplitCalibrationReader(train, meta, calibration_batches, 32)

    def fp32_files():  # the files the int8 and bf16 runtimes start from
        if not onnx.is_file():
            export_format("onnx", net, meta, onnx)
        if not xml.is_file() and (only is None or any(n.startswith("ov_") for n in only)):
            export_format("openvino", net, meta, xml, onnx_path=onnx)

    builders = {
        "eager": lambda: net,
        "eager_channels_last": lambda: _channels_last(net),
        "torch_compile": lambda: torch.compile(copy.deepcopy(net), dynamic=False),
        "torchscript": lambda: _torchscript(net, meta, out),
        "ort_fp32": lambda: _ort(export_format("onnx", net, meta, onnx), threads),
        "ort_int8_qdq": lambda: _ort(
            quantize_onnx_static(onnx, out / "model_int8_qdq.onnx", reader()), threads
        ),
        "ort_int8_qoperator": lambda: _ort(
            quantize_onnx_static(
                onnx, out / "model_int8_qop.onnx", reader(), quant_format="qoperator"
            ),
            threads,
        ),
        "ov_f32": lambda: _ov(
            export_format("openvino", net, meta, xml, onnx_path=onnx), threads, "f32"
        ),
        "ov_bf16": lambda: _ov(xml, threads, "bf16"),
        "ov_int8": lambda: _ov(
            quantize_openvino_int8(
                xml, out / "model_int8.xml", train, meta, calibration_batches, 32
            ),
            threads,
            "f32",
        ),
        "executorch": lambda: _served("executorch", net, meta, out / "model.pte", threads),
        "litert": lambda: _served("litert", net, meta, out / "model.tflite", threads),
        "litert_int8": lambda: _litert_int8(net, meta, data, out, threads, calibration_batches),
    }
    unknown = sorted(set(only or ()) - set(builders))
    if unknown:
        raise ValueError(f"Unknown runtime(s) {unknown}; choose from {', '.join(builders)}.")
    fns = {}
    for name, build in builders.items():
        if only and name not in only:
            continue
        try:
            if name.startswith(("ort_int8", "ov_int8")) or name == "ov_bf16":
                fp32_files()
            fns[name] = _no_grad(build())
        except Exception as err:  # noqa: BLE001 — report and go on: one broken runtime must not hide the rest
            log.error("runtime %s unavailable here: %s: %s", name, type(err).__name__, err)
    return fns


def _channels_last(net):
    cl = copy.deepcopy(net).to(memory_format=torch.channels_last)
    return lambda x: cl(x.contiguous(memory_format=torch.channels_last))


def _torchscript(net, meta, out: Path):
    """Traced, then frozen and optimized for inference: the usual TorchScript CPU deployment."""
    module, _ = load_torchscript(
        export_format("torchscript", net, meta, out / "model_trace.torchscript", mode="trace"),
        trust_artifact=True,  # written just above
    )
    with quiet_jit():
        frozen = torch.jit.optimize_for_inference(torch.jit.freeze(module))

    def run(x):
        with quiet_jit():
            return frozen(x)

    return run


def _ort(path: Path, threads: int):
    session = make_session(path, threads)
    return lambda x: run_session(session, x)


def _served(fmt: str, net, meta, path: Path, threads: int, **options):
    """Format ``fmt`` written (and checked) at ``path``, run by the runtime predict uses."""
    return open_runtime(export_format(fmt, net, meta, path, **options), threads=threads)


def _litert_int8(net, meta, data, out: Path, threads: int, calibration_batches: int):
    """``model_int8.tflite`` through export=litert_int8's gate against ``model.tflite``."""
    fp32 = out / "model.tflite"
    if not fp32.is_file():
        export_format("litert", net, meta, fp32)
    splits = data.splits
    return _served(
        "litert_int8",
        net,
        meta,
        out / "model_int8.tflite",
        threads,
        files={"litert": fp32},
        data=ExportData(splits["train"], splits["val"]),
        quantize=Int8Options(calibration_batches=calibration_batches, latency_runs=0),
    )


def _ov(xml: Path, threads: int, precision: str):
    """An OpenVINO request at ``precision`` (the runtime class would use the file's own)."""
    import openvino as ov

    compiled = compile_model(ov.Core().read_model(str(xml)), threads, precision)
    request = compiled.create_infer_request()
    output = compiled.output(0)
    return lambda x: torch.from_numpy(request.infer({0: x.numpy()})[output].copy())
