"""Serving: ``python -m lightning_cls.serve artifact=...`` — batched HTTP inference on one CPU.

``ServeConfig`` (``config.py``) holds every option; ``ServeApp`` (``app.py``) is the ASGI app
(``/predict``, ``/``, ``/health``, ``/info``, ``/metrics``); ``inputs.py`` checks and decodes
request bodies; ``Batcher`` (``batcher.py``) batches on the event loop and runs the model in
one thread; ``serve`` (``server.py``) runs it on uvicorn in one or ``workers`` processes, with
a SIGTERM drain. Needs the ``serve`` extra. No Hydra or Lightning below the entry point.
"""

from lightning_cls.serve.app import ServeApp
from lightning_cls.serve.config import ServeConfig
from lightning_cls.serve.server import serve

__all__ = ["ServeApp", "ServeConfig", "serve"]
