import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_plain_loop_example_learns_digits():
    proc = subprocess.run(
        [sys.executable, str(REPO / "examples" / "plain_loop_with_datamodule.py"), "--epochs", "3"],
        capture_output=True,
        text=True,
        check=True,
    )
    last = proc.stdout.strip().splitlines()[-1]
    assert float(last.rsplit(" ", 1)[1]) > 0.8, last  # val accuracy; chance is 0.1
