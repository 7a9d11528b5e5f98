"""What the kNN rejection rule adds to predict time: batch-64 ``predict_files`` of the default
model's ONNX file, with ``reject=knn`` against the same file's network without a rule.

    python benchmarks/reject_cost.py --rounds 15
    python benchmarks/reject_cost.py --quick      # 1 epoch, 3 rounds (tests/benchmarks)

The default model is what ``make train`` trains (SimpleCNN on the embedded digits); this
script trains it in this process with ``reject=knn`` (its command line printed), exports it
to ONNX twice (with the rule, so with the ``features`` output; and without a rule, the plain
file), writes 64 of the test images as PNG files and times ``predict_files(..., batch_size=64)``
on both files in interleaved pairs (A, B, A, B, ...). The ratio is computed per round; the
median and range are reported. The last output line is a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from paired import cpu_name, summarize
from PIL import Image
from trust import QUIET, run


def main(argv: list[str] | None = None) -> dict:
    args = parse(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from lightning_cls import config_dir
    from lightning_cls.export import export_format
    from lightning_cls.inference import load_artifact, load_torch_model, predict_files

    summary = run("train", [f"trainer.max_epochs={args.epochs}", "reject=knn",
                            "prediction_mosaic=false", *QUIET], work / "train")  # fmt: skip
    net, spec = load_torch_model(summary["best_ckpt"])
    with_rule = export_format("onnx", net, spec, work / "knn" / "model.onnx")
    plain_spec = spec.with_decision(reject=None)
    plain = export_format("onnx", net, plain_spec, work / "plain" / "model.onnx")
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        datamodule = instantiate(compose(config_name="train").data)
    datamodule.prepare_data()
    datamodule.setup("test")
    images = datamodule.splits["test"].images[:64]
    folder = work / "images"
    folder.mkdir(exist_ok=True)
    files = []
    for i, image in enumerate(images):
        files.append(folder / f"{i}.png")
        Image.fromarray(image[0].numpy()).save(files[-1])
    predictors = {"knn": load_artifact(with_rule), "plain": load_artifact(plain)}
    for predictor in predictors.values():  # warm-up: sessions, caches, the decoded bank
        predict_files(predictor, files, batch_size=64)
    answered, _ = predict_files(predictors["knn"], files, batch_size=64)
    rounds = []
    for _ in range(args.rounds):
        times = {}
        for name, predictor in predictors.items():
            start = time.perf_counter()
            predict_files(predictor, files, batch_size=64)
            times[name] = time.perf_counter() - start
        rounds.append(times)
    bank = spec.decision.reject["bank"]["shape"]
    report = {
        "cpu": cpu_name(),
        "images": len(files),
        "bank": bank,
        "k": spec.decision.reject["k"],
        "unknown_in_test": sum(r["unknown"] for r in answered),
        "plain_ms": summarize([1e3 * r["plain"] for r in rounds])["median"],
        "knn_ms": summarize([1e3 * r["knn"] for r in rounds])["median"],
        "added": summarize([r["knn"] / r["plain"] - 1 for r in rounds]),
    }
    report["added"].pop("per_round")
    print(json.dumps(report))
    return report


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 epoch, 3 rounds")
    parser.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "reject_cost"))
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args(argv)
    if args.quick:
        args.epochs, args.rounds = 1, 3
    return args


if __name__ == "__main__":
    main()
