"""Servers and models for ``serve_load.py``: random-weight SimpleCNN / ResNet-18 artifacts,
PNG request bodies, and server processes on free 127.0.0.1 ports."""

from __future__ import annotations

import io
import json
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import psutil
import torch
from PIL import Image

from lightning_cls.export.exporter import ExportConfig, export_model
from lightning_cls.inference import InputSpec, load_artifact
from lightning_cls.models import create_model

HERE = Path(__file__).resolve().parent
# Common overrides: a queue deep enough for 64 clients, quiet logs.
SERVE_BASE = ("serve.max_queue=1024", "serve.log_level=error")
QUIET = ("serve.log_level=error",)


def make_model(name: str, out: Path, image_size: int = 32, classes: int = 10) -> dict:
    """Random-weight network -> model_weights.pt (+ .json) and model.onnx; 64 test images and
    the in-process probabilities each artifact gives for them."""
    torch.manual_seed(0)
    kwargs = {"num_classes": classes, "in_channels": 3, "image_size": image_size}
    net = create_model(name, **kwargs).eval()
    spec = InputSpec(
        classes=[f"c{i}" for i in range(classes)],
        mean=(0.49, 0.48, 0.45),
        std=(0.25, 0.24, 0.26),
        image_size=image_size,
        num_channels=3,
        model_name=name,
        model_kwargs=kwargs,
    )
    out.mkdir(parents=True, exist_ok=True)
    weights = out / "model_weights.pt"
    torch.save(net.state_dict(), weights)
    weights.with_suffix(".json").write_text(json.dumps(spec.to_dict()))
    onnx = export_model(net, spec, out, ExportConfig(formats=["onnx"])).paths["onnx"]
    g = torch.Generator().manual_seed(1)
    images = torch.randint(0, 256, (64, 3, image_size, image_size), generator=g, dtype=torch.uint8)
    expected = {
        kind: load_artifact(path).predict_images(images)
        for kind, path in (("onnx", onnx), ("eager", weights))
    }
    return {
        "weights": weights,
        "onnx": onnx,
        "images": images,
        "expected": expected,
        "classes": list(spec.classes),
    }


def correct_answer(body: dict, probs: torch.Tensor, classes: list[str], atol: float = 1e-4) -> bool:
    """The served top-k equals the in-process one: each label is the in-process label at its
    rank (or one tied with it within ``atol``: a reordering of equal probabilities), each
    probability is the in-process probability of that label."""
    got = body["predictions"][0] if "predictions" in body else body
    labels, served = got["labels"], got["probs"]
    if len(labels) != len(served) or len(set(labels)) != len(labels):
        return False
    top = probs.topk(len(labels)).values.numpy()
    index = {name: i for i, name in enumerate(classes)}
    if any(label not in index for label in labels):
        return False
    mine = probs.numpy()[[index[label] for label in labels]]  # in-process prob of each label
    return bool(np.allclose(mine, top, atol=atol) and np.allclose(served, mine, atol=atol))


def inprocess_img_s(predictor, images: torch.Tensor, batch: int, seconds: float) -> float:
    """In-process ``Predictor`` on uint8 batches (normalization included), images per second."""
    x = images[:batch]
    predictor.predict_images(x, batch)
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        predictor.predict_images(x, batch)
        n += batch
    return n / (time.perf_counter() - start)


def png_images(images: torch.Tensor) -> list[bytes]:
    bodies = []
    for img in images:
        buf = io.BytesIO()
        Image.fromarray(np.ascontiguousarray(img.permute(1, 2, 0).numpy())).save(buf, "PNG")
        bodies.append(buf.getvalue())
    return bodies


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """``python -m lightning_cls.serve`` (or the tutorial server) as a child process."""

    def __init__(
        self, artifact: Path, run_dir: Path, *overrides: str, cmd: list[str] | None = None
    ):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        run_dir.mkdir(parents=True, exist_ok=True)
        self.log = run_dir / "server.log"
        cmd = cmd or [
            sys.executable,
            "-m",
            "lightning_cls.serve",
            f"ckpt_path={artifact}",
            f"serve.port={self.port}",
            f"hydra.run.dir={run_dir}",
            *overrides,
        ]
        self.cmd = [c.replace("{port}", str(self.port)) for c in cmd]
        self.proc = subprocess.Popen(self.cmd, stdout=self.log.open("w"), stderr=subprocess.STDOUT)
        joined = " ".join(self.cmd)
        self.is_tutorial = "tutorial_server.py" in joined
        self.litserve_echo = "litserve_echo.py" in joined
        self.is_bare = self.is_tutorial or self.litserve_echo  # no /metrics

    @classmethod
    def tutorial(cls, weights: Path, run_dir: Path, echo: bool = False) -> Server:
        """The tutorial server; with ``echo``, its HTTP part alone (no decode, no model)."""
        cmd = [
            sys.executable,
            str(HERE / "tutorial_server.py"),
            str(weights),
            str(weights.with_suffix(".json")),
            "{port}",
            *(["echo"] if echo else []),
        ]
        return cls(weights, run_dir, cmd=cmd)

    @classmethod
    def litserve_echo(cls, run_dir: Path) -> Server:
        """Bare LitServe with a no-op LitAPI (``litserve_echo.py``): LitServe's own ceiling."""
        cmd = [sys.executable, str(HERE / "litserve_echo.py"), "{port}", "32", "0.002"]
        return cls(Path("-"), run_dir, cmd=cmd)

    def wait_ready(self, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        health = getattr(self, "health", "/docs" if self.is_tutorial else "/health")
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.cmd} exited:\n{self.log.read_text()[-3000:]}")
            try:
                if httpx.get(self.url + health, timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"{self.cmd} not ready after {timeout} s")

    def batch_stats(self) -> tuple[float, float]:
        """(images, model calls) so far, from /metrics; (0, 0) for the tutorial server."""
        if self.is_bare:
            return 0.0, 0.0
        text = httpx.get(self.url + "/metrics", timeout=10).text
        total = float(re.search(r"^lightning_cls_batch_size_sum (\S+)", text, re.M).group(1))
        calls = float(re.search(r"^lightning_cls_batch_size_count (\S+)", text, re.M).group(1))
        return total, calls

    def _tree(self) -> list[psutil.Process]:
        root = psutil.Process(self.proc.pid)
        return [root, *root.children(recursive=True)]

    def suspend(self) -> None:
        """SIGSTOP the server and its children: an idle LitServe worker polls its request
        queue every millisecond and would take CPU from the server being measured."""
        for p in self._tree():
            p.suspend()

    def resume(self) -> None:
        for p in self._tree():
            p.resume()

    def rss_mb(self) -> float:
        """Resident memory of the server and all its child processes, in MB."""
        root = psutil.Process(self.proc.pid)
        procs = [root, *root.children(recursive=True)]
        return sum(p.memory_info().rss for p in procs if p.is_running()) / 1e6

    def stop(self) -> None:
        if self.proc.poll() is None:
            tree = self._tree()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                pass
            # No process of the tree outlives the benchmark: bare LitServe's main process exits
            # on SIGTERM, leaving its forked HTTP processes running (polling, using CPU).
            for p in tree:
                try:
                    if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                        p.kill()
                except psutil.NoSuchProcess:
                    pass
            self.proc.wait()
