"""Serving: ``python -m lightning_cls.serve ckpt_path=...`` — batched HTTP inference on one CPU.

``ServeConfig`` (``config.py``) holds every option; ``ServeApp`` (``app.py``) is the ASGI app
(``/predict``, ``/``, ``/health``, ``/info``, ``/metrics``), and ``oip.py`` the Open Inference
Protocol v2 under ``/v2`` (``oip_tensors.py``: its tensors; ``responses.py``: the JSON answers
both send), and ``grpc_oip.py`` the same over gRPC on ``serve.grpc_port`` (the ``grpc`` extra); ``inputs.py`` checks and decodes request bodies; ``Batcher`` (``batcher.py``)
batches on the event loop and runs the model in one thread; ``serve`` (``server.py``) runs it on uvicorn in one or ``workers`` processes, with
a SIGTERM drain. Needs the ``serve`` extra. No Hydra or Lightning below the entry point.
"""

from lightning_cls.serve.config import ServeConfig

__all__ = ["ServeApp", "ServeConfig", "serve"]


def __getattr__(name: str):
    # PEP 562: the app and the server load the runtimes (torch); ``python -m lightning_cls.serve
    # --help`` imports this package first and needs neither (tests/test_layers.py).
    if name == "ServeApp":
        from lightning_cls.serve.app import ServeApp

        return ServeApp
    if name == "serve":
        from lightning_cls.serve.server import serve

        return serve
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
