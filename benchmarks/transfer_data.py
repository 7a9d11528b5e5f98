"""The two ImageFolder trees of the transfer experiment (docs/benchmarks.md, "Transfer"),
made from the CIFAR-10 training JPEGs (``../shared/data/cifar10-train-jpg.tar.gz``, unpacked).

    python benchmarks/transfer_data.py --source <unpacked>/train --out <dir>   # <dir>/pre, <dir>/fine
    python benchmarks/transfer_data.py --quick      # the same split of a small generated tree

``pre`` (``$PRE`` in the docs; classes 0-4, airplane...deer): ``train/`` = the first 4,500
files of each class in name order (the DataModule holds 10% of them out as its test split),
``val/`` = the last 500. ``fine`` (``$FINE``; classes 5-9, dog...truck): ``train/`` = the first
100 files of each class, ``val/`` = the next 100, ``test/`` = the next 500. Files are
hard-linked (copied across file systems). Last line: the image count per folder, as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path

# (first class, last class + 1) and the per-class slices of each split, in file-name order.
PRE = ((0, 5), {"train": (0, 4500), "val": (4500, 5000)})
FINE = ((5, 10), {"train": (0, 100), "val": (100, 200), "test": (200, 700)})


def make_tree(source: Path, out: Path, classes: tuple[int, int], slices: dict) -> dict:
    """Link ``slices`` of each class folder of ``source`` (sorted class names = CIFAR-10 label
    order) into ``out/<split>/<class>/``; return the count per split."""
    names = sorted(p.name for p in source.iterdir() if p.is_dir())
    if len(names) < classes[1]:
        raise FileNotFoundError(f"{source} has {len(names)} class folders; need {classes[1]}.")
    counts = {}
    for split, (start, stop) in slices.items():
        counts[split] = 0
        for name in names[classes[0] : classes[1]]:
            files = sorted((source / name).iterdir())[start:stop]
            if len(files) < stop - start:
                raise FileNotFoundError(f"{source / name} has too few files for {split}.")
            target = out / split / name
            target.mkdir(parents=True, exist_ok=True)
            for f in files:
                _link(f, target / f.name)
            counts[split] += len(files)
    return counts


def _link(src: Path, dst: Path) -> None:
    if dst.exists():
        return
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _scaled(slices: dict, factor: int) -> dict:
    return {k: (a // factor, b // factor) for k, (a, b) in slices.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, help="the unpacked train/ folder (10 classes)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--quick", action="store_true", help="a generated tree, counts / 100")
    args = parser.parse_args()
    pre, fine, work = PRE[1], FINE[1], None
    if args.quick:
        work = Path(tempfile.mkdtemp(prefix="transfer-data-"))
        args.source, args.out = work / "train", work / "out"
        for k in range(10):
            (args.source / f"class{k}").mkdir(parents=True)
            for i in range(50):
                (args.source / f"class{k}" / f"{i:04d}.jpg").write_bytes(bytes([k, i]))
        pre, fine = _scaled(pre, 100), _scaled(fine, 100)
    elif args.source is None or args.out is None:
        parser.error("--source and --out are needed (or --quick)")
    result = {
        "pre": make_tree(args.source, args.out / "pre", PRE[0], pre),
        "fine": make_tree(args.source, args.out / "fine", FINE[0], fine),
    }
    if work is not None:
        shutil.rmtree(work)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
