"""``python -m lightning_cls.predict ckpt_path=<any model artifact> inputs=<files or folder>``:
batched inference to a CSV (file, top-k labels, probabilities), using the preprocessing stored
with the artifact (flip TTA included when the model was trained with it). ``ckpt_path`` may be
a ``.ckpt``, a ``model_weights.pt`` (+ ``model_name=`` if nothing beside it says which
network), a ``.torchscript``, an ``.onnx`` (fp32 or int8), an OpenVINO ``.xml`` or a ``.pt2``
(``.pt2`` and TorchScript can run code when loaded: they need ``trust_artifact=true``). An
artifact without lightning_cls metadata (an ONNX file from another tool) takes
``+spec.classes=[...] +spec.mean=[...] +spec.std=[...] +spec.image_size=N
+spec.num_channels=C``; the same overrides fix a wrong value the artifact carries. Files that are not
readable images (FIFOs and other non-regular files included) are listed with the reason,
never silently dropped, and never block. ``+conformal=alpha`` asks for the prediction sets
fitted at calibration (a ``set`` column); predict never fits them, so an artifact without sets
at that alpha is refused, naming the calibration that fits them. A user error (bad path, bad
batch_size, missing or inconsistent metadata, a corrupt or untrusted artifact) ends in one
``error:`` line on stderr and exit code 1."""

from __future__ import annotations

import logging
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from lightning_cls import config_dir
from lightning_cls.cli import run_cli
from lightning_cls.cli.run_config import checkpoint_file

log = logging.getLogger(__name__)


def predict(cfg: DictConfig) -> list[dict]:
    cfg.ckpt_path = checkpoint_file(cfg.ckpt_path)  # a training run's folder: its best .ckpt
    for key in ("batch_size", "top_k"):
        if not isinstance(cfg[key], int) or cfg[key] < 1:
            raise ValueError(f"{key}={cfg[key]} must be an integer >= 1; e.g. {key}=32.")
    # Imported here: --help and config errors load no runtime (tests/test_layers.py).
    from lightning_cls.inference import (
        find_images,
        load_artifact,
        predict_files,
        write_predictions_csv,
    )
    from lightning_cls.inference.flags import check_trust_flag
    from lightning_cls.inference.runtimes import runtime_for

    # A real boolean only: Hydra reads trust_artifact=no as the string "no", which bool() trusts.
    trust_artifact = check_trust_flag("trust_artifact", cfg.get("trust_artifact", False))
    alpha = cfg.get("conformal")  # +conformal=alpha: the sets fitted at calibration, or a refusal
    if alpha is not None:
        from lightning_cls.inference.conformal import check_alpha

        alpha = check_alpha(alpha)

    device = cfg.device
    if device == "auto":  # a GPU where there is one, for the PyTorch kinds
        device = "cpu"
        if runtime_for(Path(cfg.ckpt_path)).arrays == "torch":  # ONNX, OpenVINO: no torch
            import torch  # only for a PyTorch kind: predicting an ONNX file loads no torch

            device = "cuda" if torch.cuda.is_available() else "cpu"
    spec = OmegaConf.to_container(cfg.spec) if cfg.get("spec") else None
    predictor = load_artifact(
        cfg.ckpt_path,
        model_name=cfg.get("model_name"),
        spec=spec,
        device=device,
        trust_artifact=trust_artifact,
    )
    log.info("Loaded %s", predictor)
    check_sets(alpha, predictor.spec.decision.conformal, str(cfg.ckpt_path))
    inputs = OmegaConf.to_container(cfg.inputs) if OmegaConf.is_list(cfg.inputs) else [cfg.inputs]
    files = find_images(inputs)
    # A 3-class model has 3 ranked labels: top_k=5 (the default) would leave label_4, label_5
    # empty in every row. (A multi-label CSV has one column per class whatever top_k is.)
    top_k = min(cfg.top_k, len(predictor.spec.classes))
    rows, failures = predict_files(predictor, files, cfg.batch_size, top_k)
    write_predictions_csv(cfg.output, rows, failures, top_k, predictor.spec)
    if cfg.get("mosaic"):  # opt-in picture of the predictions
        # Imported here: drawing loads matplotlib, which predict needs only for this.
        from lightning_cls.figures.mosaic import write_files_mosaic

        write_files_mosaic(rows, predictor.spec.classes, cfg.mosaic, task=predictor.task)
    log.info("Wrote %d predictions to %s", len(rows), cfg.output)
    for path, reason in failures:
        log.warning("Skipped %s: %s", path, reason)
    return rows


def check_sets(alpha: float | None, rule: dict | None, ckpt_path: str) -> None:
    """``+conformal=alpha`` asks for prediction sets, which predict never fits (they need the
    validation images): the artifact's own sets at that alpha are given, anything else is one
    line naming the value and the calibration that fits them."""
    if alpha is None:
        return
    source = ckpt_path if ckpt_path.endswith(".ckpt") else "<its .ckpt>"
    fix = f"python -m lightning_cls.calibrate ckpt_path={source} conformal={alpha:g}"
    if rule is None:
        raise ValueError(
            f"conformal={alpha:g}: {ckpt_path} has no prediction sets, and predict does not fit "
            f"them; fit them on validation first ({fix}), then predict with the calibrated "
            "checkpoint."
        )
    if rule["alpha"] != alpha:
        raise ValueError(
            f"conformal={alpha:g} but the prediction sets of {ckpt_path} were fitted at "
            f"conformal={rule['alpha']:g}; drop conformal= to use them, or refit them ({fix})."
        )


@hydra.main(config_path=config_dir(), config_name="predict", version_base="1.3")
def main(cfg: DictConfig) -> None:
    predict(cfg)  # a user error ends in one `error: ...` line and exit 1 (run_cli)


if __name__ == "__main__":
    run_cli(main)
