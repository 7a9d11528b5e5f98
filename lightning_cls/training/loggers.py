"""Logger factories for configs that need more than a constructor call."""

from __future__ import annotations

import csv
import os
from pathlib import Path

from pytorch_lightning import loggers as pl_loggers
from pytorch_lightning.loggers import MLFlowLogger
from pytorch_lightning.loggers.csv_logs import ExperimentWriter
from pytorch_lightning.loggers.logger import rank_zero_experiment


def mlflow_file_logger(save_dir: str, experiment_name: str, **kwargs) -> MLFlowLogger:
    """MLflow logging into a local folder (``mlflow ui --backend-store-uri file:<save_dir>``).

    MLflow 3 keeps the file store in maintenance mode and refuses it unless
    ``MLFLOW_ALLOW_FILE_STORE`` is set; a local store needs no server, which is the point here.
    """
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = Path(save_dir).resolve().as_uri()
    return MLFlowLogger(experiment_name=experiment_name, tracking_uri=uri, **kwargs)


class _ResumingWriter(ExperimentWriter):
    """Lightning's CSV writer, continuing a ``metrics.csv`` that another process of this run wrote.

    With ``strategy=ddp_spawn`` (``trainer=ddp_sim``) fit and test run in different processes,
    each with a copy of the writer made in the parent, which never saw fit's columns: Lightning's
    writer then rewrites the file with the test columns only and fails (``dict contains fields
    not in fieldnames``), or deletes fit's rows when it is created afresh. No public hook sets the
    columns, so this overrides two private methods; pytorch-lightning is pinned to the tested
    minor version in pyproject.toml.
    """

    def _check_log_dir_exists(self) -> None:
        # Run folders are unique per run (paths.output_dir), so an existing file is this run's.
        self._fs.makedirs(self.log_dir, exist_ok=True)

    def _record_new_keys(self) -> set[str]:
        if not self.metrics_keys and self._fs.isfile(self.metrics_file_path):
            with self._fs.open(self.metrics_file_path, "r", newline="") as fh:
                self.metrics_keys = list(csv.DictReader(fh).fieldnames or [])
        return super()._record_new_keys()


class CSVLogger(pl_loggers.CSVLogger):
    """``pytorch_lightning.loggers.CSVLogger`` whose file survives fit and test in separate processes."""

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _ResumingWriter(log_dir=self.log_dir)
        return self._experiment


class WandbLogger(pl_loggers.WandbLogger):
    """``pytorch_lightning.loggers.WandbLogger`` with one W&B run per training run, and a
    one-line error when W&B cannot log in.

    Lightning's logger reuses any W&B run already open in the process. In a Hydra multirun the
    basic launcher runs the jobs one after another in one process, so every job would log into
    the first job's run; this logger finishes a run left open by an earlier job (``train()``
    closes its own with ``close_loggers``, a crashed job may not) and starts its own. Offline
    (``WANDB_MODE=offline`` or ``offline=True``) it needs no account and no network.
    """

    @property
    @rank_zero_experiment
    def experiment(self):
        if self._experiment is not None or getattr(self, "_attach_id", None) is not None:
            return super().experiment
        import wandb

        if wandb.run is not None:
            wandb.finish()
        try:
            return super().experiment
        except wandb.errors.UsageError as err:  # no API key: online mode without `wandb login`
            raise ValueError(
                f"logger=wandb cannot start a W&B run: {err} Log in with `wandb login`, or log "
                "offline: WANDB_MODE=offline (or logger.wandb.offline=true), then `wandb sync`."
            ) from err


def close_loggers(loggers) -> None:
    """Finish the W&B runs of these loggers: W&B keeps a run open until the process exits,
    and until then its folder is incomplete and the next run of the process would join it."""
    for logger in loggers:
        if isinstance(logger, pl_loggers.WandbLogger) and logger._experiment is not None:
            logger._experiment.finish()
