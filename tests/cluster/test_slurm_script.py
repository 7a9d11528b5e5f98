"""``scripts/slurm_cluster.sh``'s munge step, with stand-in commands (no SLURM needed): a munge
daemon that already answers ``munge -n | unmunge`` is reused, never a second one started (it
would fail on the socket lock) nor recorded for ``stop`` to kill; without one, ours starts."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "slurm_cluster.sh"


def start_munge(tmp_path, answers: bool) -> subprocess.CompletedProcess:
    """``start_munge`` of the sourced script; ``munge``/``unmunge`` stand-ins that answer (a
    daemon runs) or not, and file-system and daemon commands that only record their call."""
    bin_ = tmp_path / "bin"
    bin_.mkdir(exist_ok=True)
    for name, code in (("munge", 0), ("unmunge", 0 if answers else 1)):
        (bin_ / name).write_text(f"#!/bin/sh\ncat > /dev/null\nexit {code}\n")
        (bin_ / name).chmod(0o755)
    script = f"""
        source {SCRIPT}
        mkdir() {{ :; }}; chown() {{ :; }}; mungekey() {{ :; }}
        runuser() {{ echo "$*" > "$DIR/runuser"; echo 4242 > "$DIR/munged.pid.tmp"; }}
        start_munge
    """
    env = {"PATH": f"{bin_}:/usr/bin:/bin", "SLURM_CLUSTER_DIR": str(tmp_path)}
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env)


def test_a_running_munge_daemon_is_reused_and_left_alone(tmp_path):
    done = start_munge(tmp_path, answers=True)
    assert done.returncode == 0, done.stderr
    assert "reusing the munge daemon already running" in done.stderr
    assert not (tmp_path / "runuser").exists()  # no second munged
    assert not (tmp_path / "munged.pid").exists()  # stop() will not kill the host's daemon


def test_without_a_running_daemon_ours_starts_and_is_recorded(tmp_path):
    done = start_munge(tmp_path, answers=False)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "runuser").read_text().startswith("-u munge -- munged --pid-file=")
    assert (tmp_path / "munged.pid").read_text().strip() == "4242"


@pytest.mark.parametrize("command", ["start", "stop"])
def test_sourcing_the_script_runs_no_command(tmp_path, command):
    env = {"PATH": "/usr/bin:/bin", "SLURM_CLUSTER_DIR": str(tmp_path)}
    done = subprocess.run(
        ["bash", "-c", f"source {SCRIPT} {command}; echo sourced"],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout == "sourced\n", done.stderr
