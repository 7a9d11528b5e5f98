"""Logger factories for configs that need more than a constructor call."""

from __future__ import annotations

import os
from pathlib import Path

from pytorch_lightning.loggers import MLFlowLogger


def mlflow_file_logger(save_dir: str, experiment_name: str, **kwargs) -> MLFlowLogger:
    """MLflow logging into a local folder (``mlflow ui --backend-store-uri file:<save_dir>``).

    MLflow 3 keeps the file store in maintenance mode and refuses it unless
    ``MLFLOW_ALLOW_FILE_STORE`` is set; a local store needs no server, which is the point here.
    """
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = Path(save_dir).resolve().as_uri()
    return MLFlowLogger(experiment_name=experiment_name, tracking_uri=uri, **kwargs)
