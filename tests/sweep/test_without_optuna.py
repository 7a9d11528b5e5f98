"""Without the `sweep` extra the plugin stays silent and fails only when used (issue 19: every
command printed Hydra's "Plugin is incompatible ... No module named 'optuna'" warning)."""

from __future__ import annotations

import os
import subprocess
import sys

# Runs a module as `python -m` would, with `import optuna` failing as on a machine without it.
WITHOUT_OPTUNA = """
import runpy, sys
sys.modules["optuna"] = None
module, *args = sys.argv[1:]
sys.argv = [module, *args]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


def _run(tmp_path, *args: str) -> subprocess.CompletedProcess:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("HYDRA_FULL_ERROR", "LIGHTNING_CLS_FULL_ERROR")
    }
    cmd = [sys.executable, "-c", WITHOUT_OPTUNA, "lightning_cls.train", *args]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def test_commands_start_without_a_plugin_warning(tmp_path):
    done = _run(tmp_path, "--cfg", "job")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Plugin is incompatible" not in done.stderr and "optuna" not in done.stderr
    assert "model:" in done.stdout  # the config was printed: Hydra started normally


def test_the_sweeper_names_the_extra_when_used(tmp_path):
    done = _run(tmp_path, "-m", "hparams_search=digits_optuna", f"hydra.sweep.dir={tmp_path}/s")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and "Plugin is incompatible" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "error: hydra/sweeper=optuna (hparams_search=...) needs Optuna: "
        "pip install 'lightning-cls[sweep]'. (while building hydra.sweeper)"
    )
