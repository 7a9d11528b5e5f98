"""The body of each process of ``test_a_rank_without_samples_joins_the_gather``
(tests/training/test_multilabel.py), in a module that imports little: its ranks import it."""

from __future__ import annotations

import torch


def gather_with_an_empty_rank(rank: int, init: str, out: str) -> None:
    import torch.distributed as dist

    from lightning_cls.training.tasks.multilabel import EpochOutputs

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    outputs = EpochOutputs(4)
    if rank == 0:  # rank 1's shard of a 3-image split is empty
        outputs.update(torch.rand(3, 4), torch.ones(3, 4))
    probs, targets = outputs.compute()
    torch.save((probs.shape, targets.shape, targets.dtype), f"{out}/{rank}.pt")
    dist.destroy_process_group()
