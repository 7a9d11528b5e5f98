"""Exact and near duplicates, within a split and across splits.

Each image is hashed as training sees it (the decoded uint8 array of its split): exact
duplicates share every pixel (SHA-1 of the array), near duplicates a perceptual hash
(``imagehash.phash``: a 64-bit sign pattern of the image's low DCT frequencies, stable under
resizing, re-compression and small colour changes) within ``max_distance`` differing bits.

Pairs are found without comparing all N^2 hashes (multi-index hashing, Norouzi et al. 2012):
two 64-bit hashes at most d bits apart agree exactly on at least one of d + 1 disjoint bands
(pigeonhole), so only hashes sharing a band are compared. Identical hashes are merged first,
so a thousand blank images cost one bucket entry, not a million pairs. Matches are joined into
groups (union-find): one group per picture, with every copy and the splits it is in.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict

import numpy as np
from PIL import Image

HASH_BITS = 64


def to_pil(image: np.ndarray) -> Image.Image:
    """(C, H, W) uint8 -> PIL "L" or "RGB"."""
    return (
        Image.fromarray(image[0], "L")
        if image.shape[0] == 1
        else Image.fromarray(np.ascontiguousarray(image.transpose(1, 2, 0)), "RGB")
    )


def image_hashes(images) -> tuple[list[str], np.ndarray]:
    """SHA-1 of each (C, H, W) uint8 image's pixels, and its phash as a uint64."""
    import imagehash  # the doctor extra: imported when hashing, not on import of the package

    exact, perceptual = [], np.zeros(len(images), dtype=np.uint64)
    for i in range(len(images)):
        image = np.ascontiguousarray(images[i])
        exact.append(hashlib.sha1(image.tobytes()).hexdigest())
        bits = imagehash.phash(to_pil(image)).hash.flatten()  # (64,) bool
        perceptual[i] = np.packbits(bits).view(">u8")[0]  # 64 bits, first bit highest
    return exact, perceptual


def near_pairs(hashes: np.ndarray, max_distance: int) -> list[tuple[int, int, int]]:
    """(i, j, bits apart) for every pair of DISTINCT values in ``hashes`` (uint64) within
    ``max_distance`` bits, as indexes into ``hashes``."""
    if not 0 <= max_distance < HASH_BITS // 2:
        raise ValueError(
            f"doctor.near_distance={max_distance} must be in 0..{HASH_BITS // 2 - 1} "
            "(bits of the 64-bit perceptual hash; 4 is a close copy, 0 exact hashes only)."
        )
    bands = max_distance + 1
    edges = np.linspace(0, HASH_BITS, bands + 1).astype(int)
    found: set[tuple[int, int]] = set()
    for lo, hi in zip(edges[:-1], edges[1:]):
        mask = np.uint64((1 << int(hi - lo)) - 1)
        keys = (hashes >> np.uint64(lo)) & mask  # (U,) the band's bits
        order = np.argsort(keys, kind="stable")
        cuts = np.flatnonzero(np.diff(keys[order])) + 1
        for bucket in np.split(order, cuts):
            if len(bucket) > 1:
                found.update(_close_in(bucket, hashes, max_distance))
    pairs = []
    for i, j in sorted(found):
        pairs.append((i, j, int(np.bitwise_count(hashes[i] ^ hashes[j]))))
    return pairs


def _close_in(bucket: np.ndarray, hashes: np.ndarray, max_distance: int):
    members = hashes[bucket]  # (b,)
    for a in range(len(bucket) - 1):
        apart = np.bitwise_count(members[a] ^ members[a + 1 :])  # (b - a - 1,)
        for b in np.flatnonzero(apart <= max_distance):
            yield int(bucket[a]), int(bucket[a + 1 + b])


def duplicate_groups(
    owners: list[tuple[str, int]], exact: list[str], perceptual: np.ndarray, max_distance: int
) -> list[dict]:
    """Groups of images that are copies of each other. ``owners[i]`` is (split, row) of image
    ``i``. Each group: ``members`` [(split, row)], ``kind`` exact|near, ``distance`` (most
    bits apart of a matched pair), ``splits`` (sorted) and ``cross_split``."""
    parent = list(range(len(owners)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def union(i: int, j: int) -> None:
        parent[find(i)] = find(j)

    first_of: dict = {}
    for i, key in enumerate(exact):  # identical pixels
        union(i, first_of.setdefault(key, i))
    values, inverse = np.unique(perceptual, return_inverse=True)  # identical hashes: one entry
    first_of = {}
    for i, u in enumerate(inverse.tolist()):
        union(i, first_of.setdefault(u, i))
    pairs = near_pairs(values, max_distance)
    for u, v, _ in pairs:
        union(first_of[u], first_of[v])
    distance: dict[int, int] = defaultdict(int)  # group root -> most bits apart of its pairs
    for u, _v, bits in pairs:
        root = find(first_of[u])
        distance[root] = max(distance[root], bits)
    members: dict[int, list[int]] = defaultdict(list)
    for i in range(len(owners)):
        members[find(i)].append(i)
    groups = []
    for root, rows in members.items():
        if len(rows) < 2:
            continue
        bits = distance.get(root, 0)
        same = len({exact[r] for r in rows}) == 1
        splits = sorted({owners[r][0] for r in rows})
        groups.append(
            {
                "members": [list(owners[r]) for r in rows],
                "kind": "exact" if same else "near",
                "distance": int(bits),
                "splits": splits,
                "cross_split": len(splits) > 1,
            }
        )
    groups.sort(key=lambda g: (not g["cross_split"], g["kind"] != "exact", -len(g["members"])))
    return groups
