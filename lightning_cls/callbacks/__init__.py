"""Lightning callbacks of lightning_cls, one per module (see docs/training.md)."""

from lightning_cls.callbacks.compile import CompileModel
from lightning_cls.callbacks.data_profiler import DataWaitProfiler
from lightning_cls.callbacks.early_stopping import EarlyStopping
from lightning_cls.callbacks.grad_norm import GradNormLogger
from lightning_cls.callbacks.gradient_clipping import GradientClipping
from lightning_cls.callbacks.lookahead import Lookahead
from lightning_cls.callbacks.lr_finder import LRFinderPlot
from lightning_cls.callbacks.model_weights import SaveModelWeights
from lightning_cls.callbacks.nan_guard import NanGuard, NonFiniteError
from lightning_cls.callbacks.oom import OOMAdvisor
from lightning_cls.callbacks.plots import TrainingPlots
from lightning_cls.callbacks.rng_state import RngState
from lightning_cls.callbacks.shape_check import ShapeCheck
from lightning_cls.callbacks.unused_params import UnusedParameterFinder
from lightning_cls.callbacks.wall_clock import WallClock
from lightning_cls.callbacks.whitening import WhiteningInit

__all__ = [
    "CompileModel",
    "DataWaitProfiler",
    "EarlyStopping",
    "GradNormLogger",
    "GradientClipping",
    "LRFinderPlot",
    "Lookahead",
    "NanGuard",
    "NonFiniteError",
    "OOMAdvisor",
    "RngState",
    "SaveModelWeights",
    "ShapeCheck",
    "TrainingPlots",
    "UnusedParameterFinder",
    "WallClock",
    "WhiteningInit",
]
