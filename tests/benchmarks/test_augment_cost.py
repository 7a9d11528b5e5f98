"""benchmarks/augment_cost.py --quick: every augmentation variant runs and is paired with crop+flip."""

from __future__ import annotations

VARIANTS = ("randaugment", "trivialaugment", "autoaugment_cifar10", "random_erasing")


def test_quick_run_times_every_variant_against_crop_flip(run_quick):
    out = run_quick("augment_cost.py", timeout=300)
    assert out["rounds"] == 2 and out["batch"] == [32, 3, 32, 32]
    for name in ("crop_flip", *VARIANTS, "torchvision_v2_randaugment_per_sample"):
        assert len(out["img_s"][name]["per_round"]) == 2 and out["img_s"][name]["min"] > 0
    for name in VARIANTS:
        ratio = out["ratio_to_crop_flip"][name]
        assert 0 < ratio["min"] <= ratio["median"] <= ratio["max"]
