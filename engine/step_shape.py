"""How many tokens a GPU prefill step reads by default: about 8192, rounded so the attention
kernel's thread blocks fill whole waves of the device's multiprocessors.

cuDNN's fused attention (sm90) gives each thread block 128 query rows of one head, one block
per multiprocessor at a time. A slice of 8192 queries x 28 heads is 64 x 28 = 1792 blocks,
13.6 waves on an H200's 132 SMs: the last wave runs 58% full, ~3% of every attention call
idle. 8448 queries = 66 x 28 = 1848 blocks = 14 full waves; its short slices (beside
decodes) are whole tiles too: 4224 (7 waves), 2816 and 1408 (run as 3 batched key parts: 7
waves). Measured on a 128K read (bench/results/prefill-cuda-20261130-1333*.json): 8.51-8.53 s
against 8.59-8.60 s with 8192.
"""
from __future__ import annotations

import math
from typing import List

TILE_ROWS = 128                  # query rows per thread block of the attention kernel
TARGET_TOKENS = 8192             # long enough for the matmuls' full speed (bench/chunk_shapes.py)
MAX_TOKENS = 9216                # and not much longer: the workspace grows with the step
SHORTEST_GRANULE = 2048          # time-budgeted chunks need short canonical slices
DIVISORS = (1, 2, 3, 4, 6, 8, 12, 16)


def canonical_query_lengths(query_slice: int, min_query: int, tile: int = TILE_ROWS) -> List[int]:
    """The slice and the shorter lengths chunks are cut into, longest first: the slice
    divided by 2, 3, 4, 6, 8, 12 or 16, in whole tiles (when the slice is) and at least
    min_query long (8192 -> 4096, 2048, 1024; 8448 -> 4224, 2816, 1408). Every multiple of
    the shortest up to the slice must be a sum of distinct lengths taken longest first (how
    chunks and key remainders are cut); where that fails, halvings only."""
    tile = tile if query_slice % tile == 0 else 1
    floor = min(min_query, query_slice)
    lengths = sorted({query_slice // k for k in DIVISORS if query_slice % k == 0
                      and (query_slice // k) % tile == 0 and query_slice // k >= floor}, reverse=True)
    if all(_cut_longest_first(m * lengths[-1], lengths[1:]) == 0
           for m in range(1, query_slice // lengths[-1])):
        return lengths
    return [query_slice >> i for i in range(16)
            if (query_slice >> i) >= floor and (query_slice >> i) << i == query_slice]


def _cut_longest_first(n: int, lengths: List[int]) -> int:
    for length in lengths:
        if n >= length:
            n -= length
    return n


def wave_sized_tokens(num_heads: int, num_sms: int) -> int:
    """The step length in [TARGET_TOKENS, MAX_TOKENS], a multiple of TILE_ROWS, whose
    attention blocks (rows / TILE_ROWS x num_heads) waste the least of their last wave and
    whose canonical lengths reach SHORTEST_GRANULE; the shortest such length on a tie."""
    def idle(tiles: int) -> float:
        waves = tiles * num_heads / num_sms
        return (math.ceil(waves) - waves) / math.ceil(waves)
    tiles = [t for t in range(TARGET_TOKENS // TILE_ROWS, MAX_TOKENS // TILE_ROWS + 1)
             if canonical_query_lengths(t * TILE_ROWS, 1024)[-1] <= SHORTEST_GRANULE]
    return min(tiles, key=lambda t: (round(idle(t), 6), t)) * TILE_ROWS
