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
