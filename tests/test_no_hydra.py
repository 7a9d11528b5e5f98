"""Only the entry points import Hydra: the library itself works in anybody's project."""

import subprocess
import sys

LIBRARY = [
    "lightning_cls.callbacks",
    "lightning_cls.checkpointing",
    "lightning_cls.data",
    "lightning_cls.export",
    "lightning_cls.fileio",
    "lightning_cls.images",
    "lightning_cls.models",
    "lightning_cls.module",
    "lightning_cls.plugins",
    "lightning_cls.shapes",
    "lightning_cls.threads",
]


def test_importing_the_library_does_not_import_hydra():
    # A fresh interpreter: this test process has imported Hydra already (other tests).
    code = (
        f"import importlib, sys\nfor name in {LIBRARY!r}:\n    importlib.import_module(name)\n"
        "from lightning_cls import plugins\nplugins.list_callbacks()\n"  # imports the built-ins
        "print(sorted(m for m in ('hydra', 'omegaconf') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
