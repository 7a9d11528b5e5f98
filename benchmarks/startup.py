"""How long the commands take to start, as a ratio to ``python -c "import torch"`` timed in the
same run (each a whole new process; rounds interleaved so load drifts hit all alike).

Timed, with each process's peak RSS (``os.wait4``; for the server, ``VmHWM`` once it answers):

- ``torch``: ``python -c "import torch"``, the yardstick.
- ``train_help``: ``python -m lightning_cls.train --help`` (target <= 0.5x, < 200 MB).
- ``train_typo``: ``python -m lightning_cls.train trainer.max_epoch=1``, a misspelt option's
  one-line error and exit 1 (target <= 0.5x).
- ``predict_onnx``: ``python -m lightning_cls.predict`` of one PNG with an ONNX model, end to
  end, the CSV written (target <= 0.75x).
- ``serve_onnx``: ``python -m lightning_cls.serve`` of the same model, from launch to the
  first ``200`` on ``/health`` (target <= 1.0x).

``python benchmarks/startup.py [--rounds 7] [--src DIR] [--write-docs]`` prints a table and,
last, one JSON line. ``--src`` runs the commands from another source tree (an older commit
unpacked with ``git archive``) for a before/after comparison; ``--write-docs`` rewrites the
section between the ``startup`` markers of ``docs/benchmarks.md``. ``--quick``: one round
after no warm-up, for the test suite (tests/benchmarks/test_startup.py).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from paired import cpu_name, export_untrained_onnx, paired_ratio, write_section

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TARGETS = {"train_help": 0.5, "train_typo": 0.5, "predict_onnx": 0.75, "serve_onnx": 1.0}
START, END = "<!-- startup:start -->", "<!-- startup:end -->"


def make_inputs(work: Path) -> tuple[Path, Path]:
    """An untrained SimpleCNN as ONNX (its spec inside) and one 32 x 32 PNG, written by a
    child process: this one stays small, because a child started from it reports this
    process's peak RSS as its own when that is larger (Linux keeps the high-water mark
    across exec)."""
    subprocess.run(
        [sys.executable, str(HERE / "startup.py"), "--inputs-only", str(work)], check=True
    )
    return work / "model.onnx", work / "image.png"


def write_inputs(work: str) -> None:
    import numpy as np
    from PIL import Image

    export_untrained_onnx("simplecnn", Path(work) / "model.onnx")
    pixels = np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(Path(work) / "image.png")


def commands(onnx: Path, png: Path, work: Path) -> dict[str, list[str]]:
    py = sys.executable
    return {
        "torch": [py, "-c", "import torch"],
        "train_help": [py, "-m", "lightning_cls.train", "--help"],
        "train_typo": [py, "-m", "lightning_cls.train", "trainer.max_epoch=1"],
        "predict_onnx": [
            py,
            "-m",
            "lightning_cls.predict",
            f"ckpt_path={onnx}",
            f"inputs={png}",
            f"output={work}/predictions.csv",
            f"hydra.run.dir={work}/predict_run",
        ],
    }


def run_once(cmd: list[str], env: dict, cwd: Path, expect_rc: int) -> tuple[float, float]:
    """(wall seconds, peak RSS in MB) of one whole process."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != expect_rc:
        raise RuntimeError(f"{cmd} exited {proc.returncode}:\n{err.decode()[-3000:]}")
    return seconds, usage.ru_maxrss / 1024  # KiB on Linux


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve_once(onnx: Path, work: Path, env: dict) -> tuple[float, float]:
    """(seconds from launch to the first 200 on /health, peak RSS in MB by then)."""
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "lightning_cls.serve",
        f"ckpt_path={onnx}",
        f"serve.port={port}",
        "serve.log_level=error",
        f"hydra.run.dir={work}/serve_run",
    ]
    log = (work / "serve.log").open("w")
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=work, stdout=log, stderr=subprocess.STDOUT)
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{cmd} exited:\n{(work / 'serve.log').read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.02)
        seconds = time.perf_counter() - start
        return seconds, peak_rss_mb(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/{pid}/status has no VmHWM line")


def machine(load_before: float, load_after: float) -> str:
    """The CPU as /proc/cpuinfo names it, its vector extensions, and the load the run saw."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    fields = {k.strip(): v.strip() for k, v in (ln.split(":", 1) for ln in lines if ":" in ln)}
    flags = set(fields.get("flags", "").split())
    vector = (
        "AVX-512" if "avx512f" in flags else "AVX2, no AVX-512" if "avx2" in flags else "no AVX2"
    )
    where = f"family {fields['cpu family']} model {fields['model']}; " if "model" in fields else ""
    return (
        f"{cpu_name()} ({where}{vector}), {os.cpu_count()} vCPUs; 1-minute load average "
        f"{load_before:.1f} at the start, {load_after:.1f} at the end (other jobs share the machine)"
    )


def measure(rounds: int, warmup: int, src: Path, work: Path) -> list[dict[str, dict]]:
    """Per round, per case: {"s": seconds, "mb": peak RSS}. Warm-up rounds are dropped."""
    onnx, png = make_inputs(work)
    env = {**os.environ, "PYTHONPATH": str(src), "HYDRA_FULL_ERROR": "0"}
    cases = commands(onnx, png, work)
    results = []
    for index in range(warmup + rounds):
        row = {}
        for name, cmd in cases.items():
            rc = 1 if name == "train_typo" else 0
            row[name] = dict(zip(("s", "mb"), run_once(cmd, env, work, rc)))
        row["serve_onnx"] = dict(zip(("s", "mb"), serve_once(onnx, work, env)))
        if index >= warmup:
            results.append(row)
        print(f"round {index}: " + ", ".join(f"{k} {v['s']:.2f}s" for k, v in row.items()))
    return results


def summarize(results: list[dict[str, dict]]) -> dict[str, dict]:
    seconds = [{k: v["s"] for k, v in row.items()} for row in results]
    summary = {}
    for name in results[0]:
        summary[name] = {
            "median_s": round(statistics.median(r[name] for r in seconds), 3),
            "peak_mb": round(statistics.median(row[name]["mb"] for row in results), 1),
        }
        if name != "torch":
            ratio = paired_ratio(seconds, name, "torch")
            summary[name]["ratio"] = round(ratio["median"], 3)
            summary[name]["target"] = TARGETS[name]
    return summary


def table(summary: dict[str, dict], rounds: int, label: str) -> str:
    lines = [
        f"{label}: medians of {rounds} rounds, each case a whole new process, interleaved; "
        f"ratio = the per-round time over that round's `import torch`.",
        "",
        "| case | median s | × import torch (target) | peak RSS MB |",
        "|---|---:|---:|---:|",
    ]
    for name, row in summary.items():
        ratio = f"{row['ratio']:.2f} (≤ {row['target']})" if "ratio" in row else "1"
        lines.append(f"| {name} | {row['median_s']:.2f} | {ratio} | {row['peak_mb']:.0f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--src", type=Path, default=ROOT, help="source tree to run")
    parser.add_argument("--label", default="this tree")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--write-docs", type=Path, nargs="?", const=ROOT / "docs/benchmarks.md")
    # make_inputs' child: write the model and the image into this folder, measure nothing
    parser.add_argument("--inputs-only", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inputs_only:
        write_inputs(str(args.inputs_only))
        return
    rounds, warmup = (1, 0) if args.quick else (args.rounds, args.warmup)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="startup_") as tmp:
        results = measure(rounds, warmup, args.src.resolve(), Path(tmp))
    where = machine(load_before, os.getloadavg()[0])
    summary = summarize(results)
    text = table(summary, rounds, args.label)
    print(where)
    print(text)
    if args.write_docs:
        command = "python benchmarks/startup.py " + " ".join(sys.argv[1:])
        section = f"{START}\n{where}: `{command}`\n\n{text}\n{END}"
        write_section(args.write_docs, START, END, section)
    print(json.dumps({"cpu": cpu_name(), "rounds": rounds, "cases": summary}))


if __name__ == "__main__":
    main()
