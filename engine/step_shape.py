"""How many tokens a GPU prefill step reads by default: about 8192, rounded so the attention
kernel's thread blocks fill whole waves of the device's multiprocessors.

cuDNN's fused attention (sm90) gives each thread block 128 query rows of one head, one block
per multiprocessor at a time. A slice of 8192 queries x 28 heads is 64 x 28 = 1792 blocks,
13.6 waves on an H200's 132 SMs: the last wave runs 58% full, ~3% of every attention call
idle. 8448 queries = 66 x 28 = 1848 blocks = 14 full waves. Measured on a 128K read
(bench/results/prefill-cuda-20261130-1333*.json): 8.51-8.53 s against 8.59-8.60 s with 8192.

The short slices beside decodes stay 4096/2048/1024 (1024 and 2048 run as 4 and 2 batched
key parts: 896 blocks, 6.8 waves): a granule of 1024 tokens fits a 0.15 s step at 128K deep,
one of 1408 (8448/6) did not (decode-cuda-20261130-134714.json: long TTFT 1.49x solo).
"""
from __future__ import annotations

import math
from typing import List

TILE_ROWS = 128                  # query rows per thread block of the attention kernel
TARGET_TOKENS = 8192             # long enough for the matmuls' full speed (bench/chunk_shapes.py)
MAX_TOKENS = 9216                # and not much longer: the workspace grows with the step


def canonical_query_lengths(query_slice: int, min_query: int) -> List[int]:
    """The slice, then the powers of two below half of it down to min_query, longest first
    (8192 -> 4096, 2048, 1024; 8448 -> the same). Time-budgeted chunks beside decodes are
    multiples of the shortest (the granule), so any of them is a sum of these lengths."""
    floor = min(min_query, query_slice)
    half = 1 << ((query_slice // 2).bit_length() - 1) if query_slice >= 2 else 0
    return [query_slice] + [half >> i for i in range(16) if half >> i >= max(floor, 1)]


def wave_sized_tokens(num_heads: int, num_sms: int) -> int:
    """The step length in [TARGET_TOKENS, MAX_TOKENS], a multiple of TILE_ROWS, whose
    attention blocks (rows / TILE_ROWS x num_heads) waste the least of their last wave; the
    shortest such length on a tie."""
    def idle(tiles: int) -> float:
        waves = tiles * num_heads / num_sms
        return (math.ceil(waves) - waves) / math.ceil(waves)
    tiles = range(TARGET_TOKENS // TILE_ROWS, MAX_TOKENS // TILE_ROWS + 1)
    return min(tiles, key=lambda t: (round(idle(t), 6), t)) * TILE_ROWS
