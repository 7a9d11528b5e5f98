"""benchmarks/doctor_cifar.py --quick: the data check on generated pictures with planted
copies, moved files and planted labels, timed, with the kfold and the pixel probe."""


def test_quick_mode_finds_the_planted_copies_and_reports_its_speed(run_quick):
    out = run_quick("doctor_cifar.py", "--probes", "kfold,pixels", "--plant-noise", "0.1")
    assert out["quick"] is True and out["cpu"] and out["cores"] >= 1
    assert out["images"] == 3 * (24 + 6) + 3  # train + test + the planted copies
    assert out["planted_found"] == out["planted_duplicates"] == 3
    assert out["other_duplicate_groups"] == 0  # distinct pictures are not grouped
    assert out["flipped"] == 4 and 0 <= out["label_recall"] <= 1
    assert out["seconds_per_1000"] > 0
    assert set(out["stages"]) == {"read", "files", "duplicates", "labels"}
    assert set(out["probes"]) == {"kfold", "pixels"}
    for probe, numbers in out["probes"].items():
        assert numbers["probe"] == probe and numbers["planted_labels"] == 9  # 10% of 93
        assert 0 <= numbers["planted_recall"] <= 1 and numbers["label_seconds"] > 0
