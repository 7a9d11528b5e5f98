"""Logger factories for configs that need more than a constructor call.

A requeued job (``callbacks/preemption.py``) runs again in the same run folder and continues
its loggers' runs, one curve per metric: the CSV file and the TensorBoard folder are the run
folder's own (``version: ""``), and the W&B and MLflow runs are found again through the id kept
in the run folder (``id_file``, ``run_id_file``)."""

from __future__ import annotations

import csv
import itertools
import os
import secrets
from pathlib import Path

from lightning_fabric.utilities.logger import _convert_params, _flatten_dict
from pytorch_lightning import loggers as pl_loggers
from pytorch_lightning.loggers import MLFlowLogger
from pytorch_lightning.loggers.csv_logs import ExperimentWriter
from pytorch_lightning.loggers.logger import rank_zero_experiment
from pytorch_lightning.utilities import rank_zero_only

from lightning_cls.fileio import atomic_write_text


def kept_run_id(path: str | os.PathLike | None) -> str | None:
    """The logger run id a previous attempt of this job kept in ``path``, else None."""
    if path is None or not Path(path).is_file():
        return None
    return Path(path).read_text().strip() or None


def keep_run_id(path: str | os.PathLike | None, run_id: str) -> None:
    """Keep ``run_id`` in ``path`` for a requeued job (rank 0; the file is written once)."""
    if path is not None and rank_zero_only.rank == 0 and kept_run_id(path) != run_id:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, run_id + "\n")


class ResumingMLFlowLogger(MLFlowLogger):
    """Lightning's MLflow logger whose run id is kept in ``run_id_file``: a requeued job logs
    into the run its first attempt started (steps continue), not a new one."""

    def __init__(self, *args, run_id_file: str | os.PathLike | None = None, **kwargs):
        kwargs.setdefault("run_id", kept_run_id(run_id_file))
        super().__init__(*args, **kwargs)
        self._run_id_file = run_id_file

    @rank_zero_only
    def log_hyperparams(self, params) -> None:
        """As Lightning's, but a key that is also a logged key's folder (the module's ``task``
        after the config's ``task/name``, train.py logs the config first) is logged as
        ``<key>/value``: MLflow's file store keeps each parameter as a file named by its key,
        and ``task`` failed with "Is a directory"."""
        params = _flatten_dict(_convert_params(params))
        self._folders = getattr(self, "_folders", set())
        self._folders |= {k[:i] for k in params for i, c in enumerate(k) if c == "/"}
        renamed = {f"{k}/value" if k in self._folders else k: v for k, v in params.items()}
        super().log_hyperparams(renamed)

    @property
    @rank_zero_experiment
    def experiment(self):
        client = super().experiment
        keep_run_id(self._run_id_file, self._run_id)  # set by the line above (run_id would recurse)
        return client


def mlflow_file_logger(
    save_dir: str, experiment_name: str, run_id_file: str | None = None, **kwargs
) -> MLFlowLogger:
    """MLflow logging into a local folder (``mlflow ui --backend-store-uri file:<save_dir>``);
    with ``run_id_file`` (the run folder's) a requeued job continues its run.

    MLflow 3 keeps the file store in maintenance mode and refuses it unless
    ``MLFLOW_ALLOW_FILE_STORE`` is set; a local store needs no server, which is the point here.
    """
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = Path(save_dir).resolve().as_uri()
    return ResumingMLFlowLogger(
        experiment_name=experiment_name, tracking_uri=uri, run_id_file=run_id_file, **kwargs
    )


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


_EVENT_FILES = itertools.count()  # this process's TensorBoard event files


class TensorBoardLogger(pl_loggers.TensorBoardLogger):
    """Lightning's TensorBoard logger whose every event file has a name of its own.

    tensorboardX names a file ``events.out.tfevents.<second>.<host>`` and reopens a closed
    writer (Lightning closes it at the end of fit) under a new such name: a test that starts
    within the second of the fit's file truncated it, the fit's curves lost (seen in the
    preemption tests on an idle machine), and so would a requeued job that starts within the
    second. The suffix ``.<pid>.<count>`` makes each name unique; a closed writer is dropped so
    the next write opens a new, so named, file.
    """

    @property
    @rank_zero_experiment
    def experiment(self):
        if self._experiment is None:
            self._kwargs["filename_suffix"] = f".{os.getpid()}.{next(_EVENT_FILES)}"
        return super().experiment

    def finalize(self, status: str) -> None:
        super().finalize(status)
        self._experiment = None


class WandbLogger(pl_loggers.WandbLogger):
    """``pytorch_lightning.loggers.WandbLogger`` with one W&B run per training run, and a
    one-line error when W&B cannot log in.

    Lightning's logger reuses any W&B run already open in the process. In a Hydra multirun the
    basic launcher runs the jobs one after another in one process, so every job would log into
    the first job's run; this logger finishes a run left open by an earlier job (``train()``
    closes its own with ``close_loggers``, a crashed job may not) and starts its own. Offline
    (``WANDB_MODE=offline`` or ``offline=True``) it needs no account and no network.

    ``id_file`` (the run folder's): the W&B run id is kept there, so a requeued job resumes the
    same run (Lightning passes ``resume="allow"``); offline, each attempt writes its own
    ``offline-run-*`` folder of that one run, and ``wandb sync`` of them in order makes one
    curve. An ``id`` given explicitly wins.
    """

    def __init__(self, *args, id_file: str | os.PathLike | None = None, **kwargs):
        if kwargs.get("id") is None and kwargs.get("version") is None and id_file is not None:
            kwargs["id"] = kept_run_id(id_file) or secrets.token_hex(4)  # W&B's 8 characters
            keep_run_id(id_file, kwargs["id"])
        super().__init__(*args, **kwargs)

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
