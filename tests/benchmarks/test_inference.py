"""benchmarks/inference.py --quick: speed-ups quoted against the best PyTorch runtime, paired."""

import pytest


def test_quick_mode_reports_paired_speedups_against_best_pytorch(run_quick, tmp_path):
    out = run_quick(
        "inference.py",
        "--models",
        "simplecnn",
        "--runtimes",
        "eager",
        "eager_channels_last",
        "ort_fp32",
        "ort_int8_qdq",
        "--threads",
        "1",
        "--out-dir",
        str(tmp_path),
    )
    assert out["setup"]["quick"] is True and out["setup"]["rounds"] == 2
    result = out["models"]["simplecnn"]
    runtimes = result["runtimes"]
    assert set(runtimes) == {"eager", "eager_channels_last", "ort_fp32", "ort_int8_qdq"}
    for r in runtimes.values():
        assert len(r["img_s_b64"]) == 2 and min(r["img_s_b64"]) > 0
        assert len(r["p50_ms_b1"]) == 2 and min(r["p50_ms_b1"]) > 0
        assert 0.0 <= r["val_acc"] <= 1.0
    # The baseline is the faster PyTorch runtime, by median; the ratio is paired per round.
    med = {k: sorted(v["img_s_b64"])[0] + sorted(v["img_s_b64"])[1] for k, v in runtimes.items()}
    assert result["best_pytorch_b64"] == max(("eager", "eager_channels_last"), key=med.get)
    assert result["best_exported_b64"] in ("ort_fp32", "ort_int8_qdq")
    ratio = result["exported_over_pytorch_b64"]
    best, base = result["best_exported_b64"], result["best_pytorch_b64"]
    expected = [e / b for e, b in zip(runtimes[best]["img_s_b64"], runtimes[base]["img_s_b64"])]
    assert ratio["per_round"] == pytest.approx(expected, rel=1e-3)
    assert ratio["min"] <= ratio["median"] <= ratio["max"]
    int8 = result["int8"]["ort_int8_qdq"]
    assert int8["over"] == "ort_fp32" and set(int8) >= {"b64", "b1", "acc_drop_points"}


@pytest.mark.slow
def test_profile_quick_mode_reports_op_shares(run_quick):
    pytest.importorskip("openvino")
    out = run_quick("profile_inference.py", "--threads", "1")
    profiles = out["profiles"]
    assert {"ort_fp32", "ort_int8_qdq", "ort_int8_qoperator", "ov_f32", "ov_int8"} <= set(profiles)
    assert profiles["ort_fp32"]["vs_fp32"] == 1.0
    conv_ops = [op for op in profiles["ort_int8_qdq"]["shares"] if "Conv" in op]
    assert conv_ops, "the int8 profile should show the quantized convolutions"
    for p in profiles.values():
        # Each share is rounded to 3 decimals: their sum may pass 1 by 0.0005 a share.
        rounding = 0.0005 * len(p["shares"])
        assert p["us_per_run"] > 0 and 0 < sum(p["shares"].values()) <= 1 + rounding


@pytest.mark.slow  # ~30 s on 2 cores: two exports (ExecuTorch lowering, LiteRT conversion)
def test_quick_mode_times_the_on_device_runtimes_beside_onnx_runtime(run_quick, tmp_path):
    pytest.importorskip("executorch")
    from lightning_cls.export.litert import converter_python

    on_device = ["executorch", *(["litert"] if converter_python() else [])]
    out = run_quick(
        "inference.py",
        *("--models", "simplecnn", "--runtimes", "ort_fp32", *on_device),
        *("--threads", "1", "--out-dir", str(tmp_path)),
    )
    runtimes = out["models"]["simplecnn"]["runtimes"]
    assert set(runtimes) == {"ort_fp32", *on_device}  # each one built, checked and timed
    for r in runtimes.values():
        assert min(r["img_s_b64"]) > 0 and min(r["p50_ms_b1"]) > 0
    # The same network in every file: the same accuracy on the same validation images.
    assert len({r["val_acc"] for r in runtimes.values()}) == 1
