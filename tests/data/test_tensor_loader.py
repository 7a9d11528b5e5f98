"""TensorBatchLoader: batching, DistributedSampler-identical sharding, seeded and exact resume."""

import pytest
import pytorch_lightning as pl
import torch
import torch.distributed as dist
from pytorch_lightning.callbacks import ModelCheckpoint
from torch.utils.data.distributed import DistributedSampler

from helpers import make_trainer
from helpers.gloo_ranks import run_ranks
from lightning_cls.data.augment import BatchAugment
from lightning_cls.data.tensor_loader import TensorBatchLoader, batch_generator


def _data(n, c=1, s=4):
    images = torch.arange(n, dtype=torch.uint8).view(n, 1, 1, 1).expand(n, c, s, s).contiguous()
    return images, torch.arange(n)  # label == sample id


def _epoch_ids(loader):
    return [i for _, y in loader for i in y.tolist()]


def test_len_and_batches_cover_the_split():
    images, labels = _data(10)
    loader = TensorBatchLoader(images, labels, batch_size=4)
    assert len(loader) == 3 and [len(y) for _, y in loader] == [4, 4, 2]
    assert _epoch_ids(loader) == list(range(10))
    dropping = TensorBatchLoader(images, labels, batch_size=4, drop_last=True)
    assert len(dropping) == 2 and len(_epoch_ids(dropping)) == 8


@pytest.mark.parametrize("n,world", [(20, 2), (21, 2), (10, 3), (2, 3)])
@pytest.mark.parametrize("shuffle", [True, False])
def test_shards_equal_distributed_sampler(n, world, shuffle):
    images, labels = _data(n)
    for epoch in (0, 1):
        for rank in range(world):
            sampler = DistributedSampler(range(n), world, rank, shuffle=shuffle, seed=5)
            sampler.set_epoch(epoch)
            loader = TensorBatchLoader(
                images, labels, 3, shuffle, seed=5, rank=rank, world_size=world, train=True
            )
            loader.set_epoch(epoch)
            assert _epoch_ids(loader) == list(sampler)
            assert len(loader) == -(-len(sampler) // 3)


@pytest.mark.parametrize("n,world", [(21, 2), (10, 3), (2, 3), (7, 7)])
@pytest.mark.parametrize("shuffle", [True, False])
def test_eval_shards_cover_every_sample_exactly_once(n, world, shuffle):
    images, labels = _data(n)
    shards = []
    for rank in range(world):
        loader = TensorBatchLoader(images, labels, 3, shuffle, seed=5, rank=rank, world_size=world)
        ids = _epoch_ids(loader)
        assert len(loader) == -(-len(ids) // 3)
        sampler = DistributedSampler(range(n), world, rank, shuffle=shuffle, seed=5)
        assert ids == list(sampler)[: len(ids)]  # DistributedSampler's, minus the padding
        shards.append(ids)
    flat = [i for shard in shards for i in shard]
    assert sorted(flat) == list(range(n))  # none twice, none dropped
    assert max(map(len, shards)) - min(map(len, shards)) <= 1


def test_epochs_reshuffle_and_repeat_under_the_same_seed():
    images, labels = _data(32)
    a = TensorBatchLoader(images, labels, 8, shuffle=True, seed=1)
    b = TensorBatchLoader(images, labels, 8, shuffle=True, seed=1)
    first, second = _epoch_ids(a), _epoch_ids(a)
    assert sorted(first) == list(range(32)) and first != second
    assert [_epoch_ids(b), _epoch_ids(b)] == [first, second]


def test_abandoned_epoch_moves_on():
    images, labels = _data(32)
    loader = TensorBatchLoader(images, labels, 8, shuffle=True, seed=1)
    next(iter(loader))  # e.g. limit_train_batches=1
    assert _epoch_ids(loader) == loader.indices(1).tolist()


def test_state_dict_resumes_mid_epoch_exactly():
    images, labels = _data(40)
    aug = BatchAugment((0.5,), (0.5,), crop_padding=1, hflip=True)
    ref = TensorBatchLoader(images, labels, 8, shuffle=True, seed=3, augment=aug, train=True)
    expected = [b for _ in range(2) for b in ref]  # 2 epochs x 5 batches
    run = TensorBatchLoader(images, labels, 8, shuffle=True, seed=3, augment=aug, train=True)
    seen = list(run)
    it = iter(run)
    seen += [next(it), next(it)]
    state = run.state_dict()
    assert state["epoch"] == 1 and state["batches_yielded"] == 2
    resumed = TensorBatchLoader(images, labels, 8, shuffle=True, seed=3, augment=aug, train=True)
    resumed.load_state_dict(state)
    seen += list(resumed)
    assert len(seen) == len(expected)
    for (x, y), (ex, ey) in zip(seen, expected):
        assert torch.equal(y, ey) and torch.equal(x, ex)  # same samples, same augmentation
    assert _epoch_ids(resumed) == resumed.indices(2).tolist()


def test_the_key_yielded_with_a_batch_seeds_its_later_augmentation():
    images, labels = _data(20)
    aug = BatchAugment((0.5,), (0.5,), crop_padding=1, hflip=True)
    inside = TensorBatchLoader(images, labels, 8, shuffle=True, seed=2, augment=aug, train=True)
    # uint8 batches with their key, augmented later (as on_after_batch_transfer does)
    outside = TensorBatchLoader(images, labels, 8, shuffle=True, seed=2, augment_key=True)
    keys = []
    for _ in range(2):
        for (x_in, _), (x_raw, _, key) in zip(inside, outside):
            assert x_raw.dtype == torch.uint8
            assert torch.equal(x_in, aug(x_raw, train=True, generator=batch_generator(*key)))
            keys.append(key)
    assert keys[-1] == (2, 1, 2, 0)  # (seed, epoch, batch, rank)


def test_each_ddp_rank_draws_its_own_augmentation_and_rank_0_keeps_the_old_seed():
    def draws(generator):
        return torch.rand(4, generator=generator)

    # Rank 0's key is (seed, epoch, batch), as before the rank was part of it: single-process
    # runs (and resumes from their checkpoints) augment exactly as they did.
    old = hash((5, 1, 3)) & 0x7FFF_FFFF_FFFF_FFFF
    assert torch.equal(draws(batch_generator(5, 1, 3)), draws(torch.Generator().manual_seed(old)))
    assert torch.equal(draws(batch_generator(5, 1, 3, rank=0)), draws(batch_generator(5, 1, 3)))
    assert not torch.equal(draws(batch_generator(5, 1, 3, rank=1)), draws(batch_generator(5, 1, 3)))

    # Every sample is the same image, so the two ranks' batches differ only by augmentation.
    images = torch.arange(36, dtype=torch.uint8).view(1, 1, 6, 6).repeat(8, 1, 1, 1)
    labels = torch.zeros(8, dtype=torch.int64)
    aug = BatchAugment((0.5,), (0.5,), crop_padding=2, hflip=True)

    def first_batch(rank: int) -> torch.Tensor:
        loader = TensorBatchLoader(
            images, labels, 4, seed=0, rank=rank, world_size=2, augment=aug, train=True
        )
        return next(iter(loader))[0]

    assert not torch.equal(first_batch(0), first_batch(1))


def test_bad_arguments_are_explained():
    images, labels = _data(4)
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        TensorBatchLoader(images, labels, 0)
    with pytest.raises(ValueError, match="4 images but 3 labels"):
        TensorBatchLoader(images, labels[:3], 2)
    with pytest.raises(ValueError, match="rank=2 is outside world_size=2"):
        TensorBatchLoader(images, labels, 2, rank=2, world_size=2)
    with pytest.raises(ValueError, match="empty split"):
        TensorBatchLoader(images[:0], labels[:0], 2)


class _Recorder(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(1))
        self.seen: list[int] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.seen += y.tolist()
        return (self.w * x.float().mean()).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


def _fit(tmp_path, ckpt_path=None, callbacks=()):
    images, labels = _data(40)
    loader = TensorBatchLoader(images, labels, 8, shuffle=True, seed=11)
    model = _Recorder()
    trainer = make_trainer(tmp_path, callbacks, max_epochs=3)
    trainer.fit(model, loader, ckpt_path=ckpt_path)
    return model.seen


@pytest.mark.filterwarnings("ignore:Be aware that when using `ckpt_path`")
def test_lightning_resume_from_mid_and_end_of_epoch_is_exact(tmp_path):
    # 5 batches per epoch: steps 3 and 12 are mid-epoch, 5 and 10 end an epoch.
    every_step = ModelCheckpoint(tmp_path, "{step}", every_n_train_steps=1, save_top_k=-1)
    full = _fit(tmp_path, callbacks=[every_step])
    assert len(full) == 3 * 40
    for step in (3, 5, 10, 12):
        assert _fit(tmp_path, ckpt_path=tmp_path / f"step={step}.ckpt") == full[step * 8 :]


def _ddp_worker(rank, init, world, out_dir):
    world = int(world)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        images, labels = _data(21)
        loader = TensorBatchLoader(
            images, labels, 4, shuffle=True, seed=9, train=True
        )  # rank from dist
        torch.save(
            [_epoch_ids(loader), _epoch_ids(loader), len(loader)], f"{out_dir}/rank{rank}.pt"
        )
    finally:
        dist.destroy_process_group()


def test_two_process_ddp_shards_cover_the_data_like_distributed_sampler(
    tmp_path, fork_server, fork_env
):
    # Two gloo ranks forked from the pre-imported fork server; each runs _ddp_worker below.
    run_ranks(fork_server, fork_env, tmp_path, f"{__file__}:_ddp_worker", "2", str(tmp_path))
    results = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    for epoch in (0, 1):
        shards = [r[epoch] for r in results]
        assert len(shards[0]) == len(shards[1]) == 11  # ceil(21 / 2), one sample padded
        assert set(shards[0]) | set(shards[1]) == set(range(21))
        assert len(set(shards[0]) & set(shards[1])) == 1  # only the wrap-around sample repeats
        for rank in range(2):
            sampler = DistributedSampler(range(21), 2, rank, shuffle=True, seed=9)
            sampler.set_epoch(epoch)
            assert shards[rank] == list(sampler)
    assert results[0][0] != results[0][1]  # a new permutation each epoch
    assert results[0][2] == results[1][2] == 3
