"""trainer.precision=auto: bf16 only where the hardware runs it natively (issue 30)."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from helpers.hydra_configs import QUIET_TRAINER, compose
from lightning_cls.training import precision as P


@pytest.fixture
def cpu_bf16(monkeypatch):
    """Set what the CPU reports: ``cpu_bf16(True)`` is a Zen 4 / Sapphire Rapids, False an
    AVX2-only CPU (no GPU either way)."""
    monkeypatch.setattr(P, "_warned", set())
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)

    def report(native: bool, amx: bool = False) -> None:
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: native)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)

    return report


def test_auto_is_fp32_on_a_cpu_without_native_bf16_and_says_why(cpu_bf16, caplog):
    cpu_bf16(False)
    with caplog.at_level(logging.INFO, logger=P.__name__):
        assert P.resolve_precision("auto", "cpu") == "32-true"
        assert P.resolve_precision("auto", "auto") == "32-true"
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert "auto -> 32-true: the CPU has no native bf16" in lines[0]
    assert "no AVX512-BF16/AMX" in lines[0]


@pytest.mark.parametrize(("avx512_bf16", "amx"), [(True, False), (False, True)])
def test_auto_is_bf16_where_the_cpu_runs_it_natively(cpu_bf16, caplog, avx512_bf16, amx):
    cpu_bf16(avx512_bf16, amx)
    with caplog.at_level(logging.INFO, logger=P.__name__):
        assert P.resolve_precision("auto", "cpu") == "bf16-mixed"
    assert "auto -> bf16-mixed: the CPU runs bf16 natively" in caplog.text


def test_explicit_bf16_on_a_cpu_without_it_warns_once_with_the_cost(cpu_bf16, caplog):
    cpu_bf16(False)
    with caplog.at_level(logging.WARNING, logger=P.__name__):
        for _ in range(3):
            assert P.resolve_precision("bf16-mixed", "cpu") == "bf16-mixed"  # kept as asked
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "trainer.precision=bf16-mixed on a CPU without native bf16" in warnings[0].message
    assert "about 0.1x the fp32 speed" in warnings[0].message
    assert "trainer.precision=auto" in warnings[0].message


def test_explicit_settings_are_kept_without_a_warning_where_bf16_is_native(cpu_bf16, caplog):
    cpu_bf16(True)
    with caplog.at_level(logging.INFO, logger=P.__name__):
        assert P.resolve_precision("bf16-mixed", "cpu") == "bf16-mixed"
        assert P.resolve_precision("32-true", "cpu") == "32-true"
        assert P.resolve_precision(32, "cpu") == "32"
    assert caplog.records == []


@pytest.mark.parametrize(("major", "expected"), [(8, "bf16-mixed"), (7, "16-mixed")])
def test_auto_on_a_gpu_follows_its_compute_capability(monkeypatch, major, expected):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (major, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "test GPU")
    assert P.resolve_precision("auto", "gpu") == expected
    assert P.resolve_precision("auto", "auto") == expected
    assert P.resolve_precision("auto", "cpu") in ("32-true", "bf16-mixed")  # the CPU's rule


def test_the_recipe_that_wants_bf16_asks_for_auto():
    cfg = compose(overrides=["experiment=cifar10_fast"])
    assert cfg.trainer.precision == "auto"


@pytest.mark.parametrize("native", [False, True])
def test_a_training_run_resolves_auto_and_records_what_ran(cpu_bf16, tmp_path, native):
    from lightning_cls.train import train

    cpu_bf16(native)
    overrides = [
        *QUIET_TRAINER,
        "trainer.precision=auto",
        "trainer.max_epochs=1",
        "+trainer.limit_train_batches=2",
        "+trainer.limit_val_batches=1",
        "+trainer.limit_test_batches=1",
        "export=none",
        "prediction_mosaic=false",
    ]
    summary = train(compose(overrides=overrides, tmp=tmp_path))
    expected = "bf16-mixed" if native else "32-true"
    assert summary["precision"] == expected
    written = json.loads((tmp_path / "run" / "results.json").read_text())
    assert written["precision"] == expected
