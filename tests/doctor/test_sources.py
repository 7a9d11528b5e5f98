"""Rows: several splits read as one sequence without copying them."""

import torch

from lightning_cls.doctor.sources import Rows


def test_rows_index_and_slice_like_the_concatenation():
    parts = [torch.randint(0, 255, (n, 3, 4, 4), dtype=torch.uint8) for n in (5, 0, 3, 4)]
    rows, whole = Rows(parts), torch.cat(parts)
    assert len(rows) == 12 and rows.shape == (12, 3, 4, 4)
    for start, stop in [(0, 12), (3, 9), (5, 8), (11, 40), (7, 7)]:
        assert torch.equal(rows[start:stop], whole[start:stop])
    assert all(torch.equal(rows[i], whole[i]) for i in range(12))
