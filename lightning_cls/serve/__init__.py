"""Serving: ``python -m lightning_cls.serve artifact=...`` — batched HTTP inference on LitServe.

``ServeConfig`` holds every option, ``build_server`` wires the LitAPI (``api.py``), the request
gate (``gate.py``: limits, decoding, per-request errors) and the metrics (``metrics.py``) into a
``LitServer``; ``serve`` runs it with a graceful SIGTERM drain. Needs the ``serve`` extra
(``pip install "lightning-cls[serve]"``). No Hydra or Lightning below the entry point.
"""

from lightning_cls.serve.server import ServeConfig, build_server, serve

__all__ = ["ServeConfig", "build_server", "serve"]
