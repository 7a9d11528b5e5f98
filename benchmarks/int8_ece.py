"""Calibration of the INT8 export: ECE of the fp32 ONNX file and of its static INT8 copy on the
held-out test split, both with the same temperature, fitted on the run's validation split.

    python benchmarks/int8_ece.py --work $WORK/ood     # the runs benchmarks/ood.py trained
    python benchmarks/int8_ece.py --quick              # trains a tiny model first (tests)

``--temperature-fit`` (``auto`` | ``nll`` | ``ece``, as ``calibrate calibration.temperature_fit=``) fits the
temperature again on validation with the library's ``calibrate`` before exporting;
``checkpoint`` keeps the one the checkpoint carries (what training fitted).

For each ``train_seed<N>`` run under ``--work`` (``benchmarks/ood.py`` writes them): the best
checkpoint is exported to ONNX, quantized with ONNX Runtime's static INT8 (QDQ, per-channel,
calibrated on 8 batches of the train split: ``export.int8`` as ``export=int8`` runs it),
and both files predict the run's own test split (the DataModule's carve, from the run's
``config_resolved.yaml``). ECE: torchmetrics, 15 bins, on the calibrated probabilities. The last
output line is a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from trust import QUIET, generated_folder, run


def main(argv: list[str] | None = None) -> dict:
    args = parse(argv)
    work = Path(args.work)
    if args.quick:
        root = generated_folder(work / "known", classes=3, per_class=24)
        run("train", ["data=imagefolder", f"data.root={root}", "data.val_size=0.25",
                      "data.test_size=0.25", "data.batch_size=16", "model=simplecnn", "seed=0",
                      "trainer.max_epochs=2", "calibration=default", "prediction_mosaic=false",
                      *QUIET], work / "train_seed0")  # fmt: skip
    runs = [one_run(folder, args.temperature_fit) for folder in sorted(work.glob("train_seed*"))]
    if not runs:
        raise FileNotFoundError(f"No train_seed*/ run under {work}; run benchmarks/ood.py first.")
    report = {"runs": runs}
    for key in ("ece_fp32", "ece_int8", "ece_gap_points", "acc_fp32", "acc_int8"):
        values = [r[key] for r in runs]
        report[key] = {"mean": round(sum(values) / len(values), 4), "values": values}
    print(json.dumps(report))
    return report


def one_run(folder: Path, temperature_fit: str) -> dict:

    import torch
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from lightning_cls.export import export_format
    from lightning_cls.export.quantize import SplitCalibrationReader, quantize_onnx_static
    from lightning_cls.inference import load_artifact, load_torch_model
    from lightning_cls.inference.tasks import create_task
    from lightning_cls.training.calibration import calibrate, expected_calibration_error

    saved = OmegaConf.load(folder / "config_resolved.yaml")  # what train wrote, resolved
    datamodule = instantiate(saved.data)
    ckpt = sorted((folder / "checkpoints").glob("*/epoch*.ckpt"))[-1]
    net, spec = load_torch_model(ckpt)
    datamodule.mean, datamodule.std = spec.mean, spec.std
    datamodule.prepare_data()
    datamodule.setup("fit")
    test, train = datamodule.splits["test"], datamodule.splits["train"]
    if temperature_fit != "checkpoint":  # the library's fit, on validation only
        fitted = calibrate(net, spec, datamodule.splits["val"], temperature_fit=temperature_fit)
        spec = spec.with_decision(temperature=fitted.temperature)
    out = folder / "int8_ece"
    fp32 = export_format("onnx", net, spec, out / "model.onnx")
    int8 = quantize_onnx_static(fp32, out / "model_int8.onnx", SplitCalibrationReader(train, spec))
    result = {"run": folder.name, "images": len(test), "temperature": spec.decision.temperature,
              "temperature_fit": temperature_fit}  # fmt: skip
    for name, path in (("fp32", fp32), ("int8", int8)):
        probs = torch.from_numpy(load_artifact(path).predict_images(test.images.numpy()))
        result[f"ece_{name}"] = round(
            expected_calibration_error(probs, test.labels, create_task()), 4
        )
        result[f"acc_{name}"] = round((probs.argmax(1) == test.labels).float().mean().item(), 4)
    result["ece_gap_points"] = round(100 * (result["ece_int8"] - result["ece_fp32"]), 2)
    return result


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a tiny model trained first")
    parser.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "ood"))
    parser.add_argument("--temperature-fit", default="auto",
                        choices=["checkpoint", "auto", "nll", "ece"],
                        help="fit T again on validation this way (checkpoint: keep its T)")  # fmt: skip
    return parser.parse_args(argv)


if __name__ == "__main__":
    main()
