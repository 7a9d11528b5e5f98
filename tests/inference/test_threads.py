"""Thread sanity: workers + intra-op threads stay within the cores, and the choice is logged."""

import logging

import pytest
import torch
from torch.utils.data import DataLoader

from lightning_cls.inference import threads


@pytest.fixture(autouse=True)
def _restore_threads():
    before = torch.get_num_threads()
    threads._last_plan = None
    yield
    torch.set_num_threads(before)


def test_plan_keeps_workers_plus_threads_within_cores():
    assert threads.plan_threads(2, cores=8) == 6
    assert threads.plan_threads(2, cores=2) == 1
    assert threads.plan_threads(0, cores=4) == 4
    with pytest.raises(ValueError, match="num_workers must be >= 0, got -1"):
        threads.plan_threads(-1, cores=4)


def test_configure_caps_threads_and_logs_one_line(caplog):
    torch.set_num_threads(4)
    with caplog.at_level(logging.INFO, logger="lightning_cls.inference.threads"):
        assert threads.configure_threads(1, cores=4, cap=True) == 3
        assert threads.configure_threads(1, cores=4, cap=True) == 3  # same: not logged again
    assert torch.get_num_threads() == 3
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "CPU threads: 4 cores, 1 DataLoader workers x 1 thread, 3 intra-op thread(s) for training."
    ]


def test_oversubscription_warns_with_the_fix(caplog):
    with caplog.at_level(logging.INFO, logger="lightning_cls.inference.threads"):
        assert threads.configure_threads(2, cores=2, cap=True) == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "num_workers=2 oversubscribes 2 cores" in warnings[0]
    assert "lower data.num_workers to 1" in warnings[0]


def test_no_cap_unless_asked_but_oversubscription_still_warns(caplog):
    torch.set_num_threads(2)
    with caplog.at_level(logging.INFO, logger="lightning_cls.inference.threads"):
        assert threads.configure_threads(1, cores=2) == 2  # a quiet machine: keep both threads
        assert threads.configure_threads(2, cores=2) == 2
    assert torch.get_num_threads() == 2
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "set data.cap_threads=true" in warnings[0]


def test_no_change_without_workers_or_on_accelerator():
    torch.set_num_threads(2)
    assert threads.configure_threads(0, cores=2) == 2
    assert threads.configure_threads(4, on_cpu=False, cores=2) == 2
    assert torch.get_num_threads() == 2


class _ThreadCount(torch.utils.data.Dataset):
    def __len__(self):
        return 2

    def __getitem__(self, i):
        return torch.get_num_threads()


@pytest.mark.parametrize("init_fn", [None, threads.worker_init_fn])
def test_workers_run_one_thread_so_only_the_main_process_is_capped(init_fn):
    # torch gives every worker one intra-op thread by itself; the cap is for the main process.
    torch.set_num_threads(2)
    loader = DataLoader(_ThreadCount(), batch_size=1, num_workers=1, worker_init_fn=init_fn)
    assert [int(b) for b in loader] == [1, 1]
    assert torch.get_num_threads() == 2


def test_worker_init_fn_keeps_lightning_worker_seeding(monkeypatch):
    # A worker_init_fn replaces Lightning's, so it must do Lightning's seeding when asked.
    from lightning_fabric.utilities.seed import pl_worker_init_function

    torch.manual_seed(3)
    pl_worker_init_function(1)
    expected = torch.rand(3)
    monkeypatch.setenv("PL_SEED_WORKERS", "1")
    torch.manual_seed(3)
    threads.worker_init_fn(1)
    torch.testing.assert_close(torch.rand(3), expected, rtol=0, atol=0)
    monkeypatch.setenv("PL_SEED_WORKERS", "0")
    torch.manual_seed(3)
    threads.worker_init_fn(1)
    assert not torch.equal(torch.rand(3), expected)
