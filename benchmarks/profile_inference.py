"""Where inference time goes, per operator type: ONNX Runtime's profiler (fp32, INT8 QDQ,
INT8 QOperator) and OpenVINO's per-layer counters (f32, bf16, NNCF INT8).

    python benchmarks/profile_inference.py --dir outputs/benchmark_inference/simplecnn
    python benchmarks/profile_inference.py --quick     # untrained SimpleCNN exported to a temp dir,
                                                       # calibrated on 16 images, 3 runs at batch 8

``--dir`` holds the files ``benchmarks/inference.py`` writes (model.onnx, model_int8_qdq.onnx,
model_int8_qop.onnx, model.xml, model_int8.xml); missing ones are skipped. Each runtime runs
``--runs`` times at ``--batch-size``; reported: total time relative to the same engine's fp32
and the share of each operator type. The last output line is one JSON object.
"""

from __future__ import annotations

import argparse
import collections
import json
import tempfile
from pathlib import Path

import numpy as np

ORT_FILES = {
    "ort_fp32": "model.onnx",
    "ort_int8_qdq": "model_int8_qdq.onnx",
    "ort_int8_qoperator": "model_int8_qop.onnx",
}
OV_RUNS = {
    "ov_f32": ("model.xml", "f32"),
    "ov_bf16": ("model.xml", "bf16"),
    "ov_int8": ("model_int8.xml", "f32"),
}


def profile_ort(path: Path, x: np.ndarray, runs: int, threads: int) -> dict[str, float]:
    """Kernel microseconds per run, summed per op type, from ORT's JSON profile."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.enable_profiling, options.intra_op_num_threads = True, threads
    with tempfile.TemporaryDirectory() as tmp:
        options.profile_file_prefix = str(Path(tmp) / "ort")
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        for _ in range(runs):
            session.run(None, {session.get_inputs()[0].name: x})
        events = json.loads(Path(session.end_profiling()).read_text())
    per_op: collections.Counter = collections.Counter()
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            per_op[e["args"]["op_name"]] += e["dur"] / runs
    return dict(per_op)


def profile_ov(path: Path, precision: str, x: np.ndarray, runs: int, threads: int) -> dict:
    """Microseconds per run, summed per (layer type, kernel), from OpenVINO's counters."""
    from lightning_cls.inference.openvino import compile_model

    compiled = compile_model(str(path), threads, precision, extra={"PERF_COUNT": True})
    request = compiled.create_infer_request()
    per_op: collections.Counter = collections.Counter()
    for _ in range(runs):
        request.infer({0: x})
        for p in request.profiling_info:
            per_op[f"{p.node_type} ({p.exec_type})"] += p.real_time.total_seconds() * 1e6 / runs
    return dict(per_op)


def quick_files(out: Path) -> Path:
    """An untrained SimpleCNN exported to every profiled format (smoke test input)."""
    import torch
    from paired import export_untrained_onnx  # sibling module

    from lightning_cls.data import Split
    from lightning_cls.export import export_format
    from lightning_cls.export.openvino import quantize_openvino_int8
    from lightning_cls.export.quantize import SplitCalibrationReader, quantize_onnx_static

    split = Split(torch.randint(0, 256, (16, 3, 32, 32), dtype=torch.uint8), torch.zeros(16))
    net, spec, onnx = export_untrained_onnx("simplecnn", out / "model.onnx")
    for fmt, name in (("qdq", "model_int8_qdq.onnx"), ("qoperator", "model_int8_qop.onnx")):
        quantize_onnx_static(
            onnx, out / name, SplitCalibrationReader(split, spec, 1, 16), quant_format=fmt
        )
    xml = export_format("openvino", net, spec, out / "model.xml", onnx_path=onnx)
    quantize_openvino_int8(xml, out / "model_int8.xml", split, spec, 1, 16)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", type=Path, help="folder with the exported files")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="untrained SimpleCNN, 3 runs at batch 8")
    args = p.parse_args()
    if args.dir is None and not args.quick:
        p.error("--dir is required (or --quick)")
    tmp = tempfile.TemporaryDirectory()
    folder = quick_files(Path(tmp.name)) if args.quick else args.dir
    runs = 3 if args.quick else args.runs
    if args.quick:
        args.batch_size = 8  # a smoke run: the op shares, not their size, are checked
    shape = (args.batch_size, 3, 32, 32)  # CIFAR input, as benchmarks/inference.py uses
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    profiles = {}
    for name, file in ORT_FILES.items():
        if (folder / file).is_file():
            profiles[name] = profile_ort(folder / file, x, runs, args.threads)
    for name, (file, precision) in OV_RUNS.items():
        if (folder / file).is_file():
            profiles[name] = profile_ov(folder / file, precision, x, runs, args.threads)
    result = {}
    for name, per_op in profiles.items():
        total = sum(per_op.values())
        base = sum(profiles.get("ov_f32" if name.startswith("ov") else "ort_fp32", {}).values())
        top = sorted(per_op.items(), key=lambda kv: -kv[1])[:4]
        shares = {op: round(us / total, 3) for op, us in top}
        result[name] = {
            "us_per_run": round(total, 1),
            "vs_fp32": round(total / base, 3) if base else None,
            "shares": shares,
        }
        print(
            f"{name:20s} {result[name]['vs_fp32']}x fp32  "
            + ", ".join(f"{op} {100 * v:.0f}%" for op, v in shares.items())
        )
    tmp.cleanup()
    print(
        json.dumps(
            {
                "batch_size": args.batch_size,
                "threads": args.threads,
                "runs": runs,
                "quick": args.quick,
                "profiles": result,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
