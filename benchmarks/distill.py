"""Knowledge distillation on CIFAR-10 JPEGs: a ResNet-18 teacher, SimpleCNN students with and
without ``distill.teacher`` at the same epochs and seeds, and their INT8 speed.

    python benchmarks/distill.py --per-class 300 --test-per-class 50 \\
        --teacher-epochs 2 --student-epochs 3 --seeds 0 1
    python benchmarks/distill.py --quick      # smoke run: generated images, tiny models

Data: ../shared/data/cifar10-train-jpg.tar.gz (train/<class>/<n>.jpg). ``--per-class`` images
of each class are drawn with a fixed seed and copied to ``--root``/train, the first
``--test-per-class`` of them to ``--root``/test (a carved test split no run trains or
validates on); every run holds 10% of train out for validation (``data=imagefolder``).
Each run is ``python -m lightning_cls.train`` in-process through the same Hydra config; the
overrides are printed. The teacher is ``experiment=cifar10_resnet18``, the students
``experiment=cifar10_simplecnn``, each student once with and once without
``distill.teacher=<teacher's best checkpoint>`` for every seed. Then the teacher and the first
distilled student are exported to ONNX and ONNX Runtime static INT8 (``export.int8``,
calibrated on train, accuracy on val) and timed at batch 1 (median of ``--latency-runs``).
Prints a markdown table; the last line is one JSON object.

``--teacher-run DIR`` takes a finished ``train`` run's output folder as the teacher (its
``results.json``: best checkpoint and test accuracy) instead of training one, e.g. the
``cifar10_fast`` run of benchmarks/trust.py; give ``--root`` its data root and
``--data-overrides`` its carve so the students are tested on the same images:

    python benchmarks/distill.py --teacher-run $WORK/trust_fast/train \
        --root $WORK/trust_fast/cifar_1000 \
        --data-overrides "data.val_size=0.2 data.test_size=0.2" --student-epochs 4 --seeds 0 1
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from paired import cpu_name  # sibling

REPO = Path(__file__).resolve().parents[1]
QUIET = [
    "trainer.accelerator=cpu",
    "trainer.devices=1",
    "trainer.enable_progress_bar=false",
    "trainer.enable_model_summary=false",
    "prediction_mosaic=false",
    "logger=csv",
]
REUSE = False  # --reuse-runs
CALLBACKS = ["~callbacks.progress_bar", "~callbacks.model_summary", "~callbacks.plots"]
QUICK_CALLBACKS = ["callbacks=[model_checkpoint]"]  # --quick: only what finds best_ckpt


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--data", type=Path, default=REPO.parent / "shared/data/cifar10-train-jpg.tar.gz"
    )
    p.add_argument("--root", type=Path, help="work folder (default: a temporary one)")
    p.add_argument("--per-class", type=int, default=300, help="images drawn per class")
    p.add_argument("--test-per-class", type=int, default=50, help="of those, carved for test")
    p.add_argument("--image-size", type=int, default=32, help="data.image_size (JPEGs are 32)")
    p.add_argument("--teacher-epochs", type=int, default=2)
    p.add_argument("--student-epochs", type=int, default=3)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--alpha", type=float, default=0.5)
    p.add_argument("--temperature", type=float, default=4.0)
    p.add_argument("--teacher", default="experiment=cifar10_resnet18", help="teacher overrides")
    p.add_argument("--student", default="experiment=cifar10_simplecnn", help="student overrides")
    p.add_argument("--teacher-run", type=Path, help="a trained run's folder: no teacher training")
    p.add_argument("--data-overrides", default="", help="more data overrides, e.g. the carve")
    p.add_argument("--reuse-runs", action="store_true", help="keep finished runs in --root/runs")
    p.add_argument("--latency-runs", type=int, default=50)
    p.add_argument("--quick", action="store_true", help="generated images, tiny models")
    args = p.parse_args(argv)
    if args.quick:
        args.teacher = "model=simplecnn model.widths=[8,16] model.hidden=32"
        args.student = "model=simplecnn model.widths=[4,8] model.hidden=16"
        args.teacher_epochs, args.student_epochs, args.seeds = 1, 1, [0]
        args.latency_runs, args.image_size = 3, 16
    return args


def carve(tar_path: Path, root: Path, per_class: int, test_per_class: int, seed: int = 0) -> None:
    """``per_class`` JPEGs of each class of the archive (seeded draw) into ``root``/train and
    ``root``/test (the first ``test_per_class`` of each class's draw). Two sequential passes:
    a gzip stream has no random access (one extract per seek back would decompress it again)."""
    with tarfile.open(tar_path, "r:*") as tar:
        names = [m.name for m in tar if m.isfile() and m.name.endswith(".jpg")]
    by_class: dict[str, list[str]] = {}
    for name in sorted(names):
        by_class.setdefault(Path(name).parts[-2], []).append(name)
    rng = random.Random(seed)
    split_of = {}
    for items in (by_class[c] for c in sorted(by_class)):
        for i, name in enumerate(rng.sample(items, per_class)):
            split_of[name] = "test" if i < test_per_class else "train"
    with tarfile.open(tar_path, "r|*") as tar:
        for member in tar:
            if member.name in split_of:
                parts = Path(member.name).parts
                dst = root / split_of[member.name] / parts[-2] / parts[-1]
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.write_bytes(tar.extractfile(member).read())


def generate(root: Path, per_class: int, test_per_class: int, classes: int = 3) -> None:
    """--quick: PNGs of a colour per class plus noise (16 x 16), the same layout as ``carve``."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for c in range(classes):
        colour = rng.integers(0, 255, 3)
        for i in range(per_class):
            split = "test" if i < test_per_class else "train"
            pixels = np.clip(colour + rng.normal(0, 40, (16, 16, 3)), 0, 255).astype(np.uint8)
            dst = root / split / f"class_{c}" / f"{i:04d}.png"
            dst.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(pixels).save(dst)


def run(name: str, overrides: list[str], root: Path, quick: bool = False) -> dict:
    """``python -m lightning_cls.train OVERRIDES`` in this process; its results.json, with the
    CPU seconds it took."""
    from hydra import compose, initialize_config_dir

    from lightning_cls import config_dir
    from lightning_cls.train import train

    out = root / "runs" / name
    if REUSE and (out / "results.json").is_file():  # --reuse-runs: a finished run of this name
        print(f"+ reusing {out}/results.json", file=sys.stderr, flush=True)
        return {**json.loads((out / "results.json").read_text()), "cpu_s": _logged_cpu(out)}
    overrides = [*overrides, *QUIET, *(QUICK_CALLBACKS if quick else CALLBACKS)]
    overrides += [f"paths.root_dir={root}", f"paths.output_dir={out}"]
    print("+ python -m lightning_cls.train", " ".join(overrides), file=sys.stderr, flush=True)
    cpu = time.process_time()
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        results = train(compose(config_name="train", overrides=overrides))
    return {**results, "cpu_s": round(time.process_time() - cpu, 1)}


def int8_speed(ckpt: str, data_overrides: list[str], out: Path, latency_runs: int) -> dict:
    """ONNX fp32 and ONNX Runtime static INT8 of ``ckpt``: val accuracy and batch-1 latency."""
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from lightning_cls import config_dir
    from lightning_cls.export.exporter import ExportConfig, export_model
    from lightning_cls.inference import load_torch_model

    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        data = instantiate(compose(config_name="train", overrides=data_overrides).data)
    net, spec = load_torch_model(ckpt)
    int8 = {"force": True, "latency_runs": latency_runs}
    config = ExportConfig(formats=["onnx", "onnx_int8"], int8=int8)
    try:
        (report,) = export_model(net, spec, out, config, datamodule=data).reports
    except Exception as error:  # noqa: BLE001 - reported in the table, the fp32 timing still stands
        return {
            "fp32_ms": _onnx_ms(out / "model.onnx", latency_runs),
            "int8_error": repr(error),
        }
    return {
        "fp32_ms": round(report.latency_before_ms, 3),
        "int8_ms": round(report.latency_after_ms, 3),
        "fp32_val_acc": round(report.acc_before, 4),
        "int8_val_acc": round(report.acc_after, 4),
        "int8_mb": round(report.size_after / 1e6, 2),
    }


def _logged_cpu(out: Path) -> float | None:
    """The fit's CPU seconds as the run logged them (``time/cpu_s`` in its metrics.csv)."""
    import csv

    for metrics in out.rglob("metrics.csv"):
        logged = [r["time/cpu_s"] for r in csv.DictReader(metrics.open()) if r.get("time/cpu_s")]
        return round(float(logged[-1]), 1) if logged else None
    return None


def _onnx_ms(path: Path, runs: int) -> float:
    """Median batch-1 latency (ms) of an ONNX file in ONNX Runtime, where the INT8 step failed."""
    import numpy as np
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (given,) = session.get_inputs()
    feed = {given.name: np.zeros((1, *given.shape[1:]), np.float32)}  # (1, C, H, W)
    session.run(None, feed)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, feed)
        times.append(1000 * (time.perf_counter() - start))
    return round(statistics.median(times), 3)


def main(argv=None) -> dict:
    args = parse_args(argv)
    global REUSE
    REUSE = args.reuse_runs
    import torch

    started, load = time.time(), os.getloadavg()
    root = args.root or Path(tempfile.mkdtemp(prefix="distill_bench_"))
    if not (root / "train").is_dir():
        if args.quick:
            generate(root, 24, 6)
        else:
            carve(args.data, root, args.per_class, args.test_per_class)
    data = ["data=imagefolder", f"data.root={root}", "data.batch_size=64"]
    data += [f"data.image_size={args.image_size}", *args.data_overrides.split()]
    if args.teacher_run is not None:
        teacher = json.loads((args.teacher_run / "results.json").read_text())
    else:
        teacher = run(
            "teacher",
            [*args.teacher.split(), *data, f"trainer.max_epochs={args.teacher_epochs}", "seed=0"],
            root,
            args.quick,
        )
    students: dict[str, list[dict]] = {"plain": [], "distilled": []}
    distill = [
        f"distill.teacher={teacher['best_ckpt']}",
        f"distill.alpha={args.alpha}",
        f"distill.temperature={args.temperature}",
    ]
    for seed in args.seeds:
        common = [*args.student.split(), *data, f"trainer.max_epochs={args.student_epochs}"]
        students["plain"].append(run(f"plain_{seed}", [*common, f"seed={seed}"], root, args.quick))
        students["distilled"].append(
            run(f"distilled_{seed}", [*common, f"seed={seed}", *distill], root, args.quick)
        )
    speed = {
        "teacher": int8_speed(
            teacher["best_ckpt"], data, root / "export_teacher", args.latency_runs
        ),
        "student": int8_speed(
            students["distilled"][0]["best_ckpt"], data, root / "export_student", args.latency_runs
        ),
    }
    summary = {
        "quick": args.quick,
        "cpu": cpu_name(),
        "torch_threads": torch.get_num_threads(),
        "load_avg_start": round(load[0], 2),
        "load_avg_end": round(os.getloadavg()[0], 2),
        "wall_s": round(time.time() - started, 1),
        "images": {s: sum(1 for _ in (root / s).rglob("*.*")) for s in ("train", "test")},
        "teacher_overrides": str(args.teacher_run or args.teacher),
        "student_overrides": args.student,
        "teacher": _row(teacher),
        **{kind: [_row(r) for r in runs] for kind, runs in students.items()},
        "speed": speed,
    }
    _print_table(summary)
    if args.root is None:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(summary))
    return summary


def _row(results: dict) -> dict:
    return {
        "test_acc": round(results["test"]["test/acc"], 4),
        "best_val_acc": results["best_val_acc"],
        "wall_s": results["wall_time_s"],
        "cpu_s": results.get("cpu_s"),  # None: a --teacher-run (trained elsewhere)
    }


def _print_table(s: dict) -> None:
    def mean(kind: str) -> str:
        accs = [100 * r["test_acc"] for r in s[kind]]
        spread = f" ({', '.join(f'{a:.1f}' for a in accs)})" if len(accs) > 1 else ""
        return f"{statistics.mean(accs):.1f}{spread}"

    print("| model | test acc % (per seed) | train CPU s | ONNX fp32 ms | INT8 ms |")
    print("|---|---|---|---|---|")
    t, sp = s["teacher"], s["speed"]
    print(
        f"| teacher: {s['teacher_overrides']} | {100 * t['test_acc']:.1f} | {t['cpu_s'] or '-'} | "
        f"{sp['teacher']['fp32_ms']} | {sp['teacher'].get('int8_ms', 'failed')} |"
    )
    for kind in ("plain", "distilled"):
        cpus = [r["cpu_s"] for r in s[kind] if r["cpu_s"] is not None]
        cpu = f"{statistics.mean(cpus):.0f}" if cpus else "-"
        ms = (
            f"{sp['student']['fp32_ms']} | {sp['student']['int8_ms']}"
            if kind == "distilled"
            else " | "
        )
        print(f"| student {kind}: {s['student_overrides']} | {mean(kind)} | {cpu} | {ms} |")


if __name__ == "__main__":
    main()
