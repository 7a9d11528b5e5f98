"""``python gloo_ranks.py NPROCS FILE:FUNCTION [ARG ...]``: call ``FUNCTION(rank, init, *ARGS)``
in NPROCS forked processes that join one gloo process group with
``dist.init_process_group("gloo", init_method=init, rank=rank, world_size=NPROCS)``. ``init`` is
a ``file://`` store in a new folder, not a TCP store on a port found free beforehand, which
another xdist worker's process can take in between (one run under load lost a group with
"Connection closed by peer"; the file store takes the port out of the question).

Tests run it through the fork server (``ForkServer.run``): the ranks are then forked from a
process with one thread and torch already imported, in about a second. Forking them from the
pytest worker instead copies a process whose other threads (xdist's channel, pytest-timeout)
may be mid-use; two full runs lost that worker ("node down") during such a test.
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path


def load(target: str):
    """FUNCTION of the Python file FILE, imported as pytest does (its folder and tests/, the
    suite's pythonpath, on sys.path)."""
    path, _, name = target.rpartition(":")
    sys.path[:0] = [str(Path(path).parent), str(Path(__file__).parents[1])]
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def run_ranks(fork_server, env: dict, cwd, target: str, *args: str, nprocs: int = 2) -> None:
    """Run this script in the fork server; fail with the ranks' output when one fails."""
    proc = fork_server.run([__file__, str(nprocs), target, *args], cwd, env, timeout=120)
    if proc.returncode != 0:
        raise AssertionError(f"{target} ranks failed ({proc.returncode}):\n{proc.stderr[-4000:]}")


def main(argv: list[str]) -> None:
    import torch.multiprocessing as mp

    nprocs, fn, args = int(argv[1]), load(argv[2]), argv[3:]
    with tempfile.TemporaryDirectory(prefix="gloo-") as folder:
        init = Path(folder, "store").as_uri()
        mp.start_processes(fn, args=(init, *args), nprocs=nprocs, start_method="fork")


if __name__ == "__main__":
    main(sys.argv)
