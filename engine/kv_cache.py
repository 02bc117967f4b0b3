"""Paged KV block bookkeeping with automatic prefix caching.

Each block is in exactly one state:
  * free (uncached)        -- marked in `_uncached`, ref 0, no hash
  * free but cached        -- in `_free_cached` (LRU, oldest first), ref 0, hash kept for reuse
  * referenced             -- ref >= 1, owned by one or more requests
With no requests alive: referenced == 0 and num_free == num_blocks.

A full block's hash = H(parent block hash, its token ids, extra keys); extra keys are the
content hashes of multimodal items overlapping the block, so different images never share KV.
"""
from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from typing import List, Optional, Sequence, Union

from .request import Request

# Evicting ahead for a prompt being read (BlockPool.allocate): at most this many tokens'
# worth, the GPU attention's longest key piece (longer runs gain nothing).
UPCOMING_TOKENS_CAP = 32768


def hash_block(parent: Optional[bytes], token_ids: Union[Sequence[int], memoryview],
               extra_keys: Sequence[str]) -> bytes:
    """token_ids: the block's ids, or their int64 bytes already (as _hash_full_blocks passes)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(parent or b"root")
    h.update(token_ids if isinstance(token_ids, memoryview) else array("q", token_ids).tobytes())
    for key in extra_keys:
        h.update(b"|mm|" + key.encode())
    return h.digest()


def block_extra_keys(request: Request, start: int, end: int) -> List[str]:
    return [item.content_hash for item in request.mm_items
            if item.offset < end and item.offset + item.length > start]


class BlockPool:
    def __init__(self, num_blocks: int):
        self.num_blocks = num_blocks
        self.ref_counts = [0] * num_blocks
        self.block_hash: List[Optional[bytes]] = [None] * num_blocks
        self.cached: dict = {}                       # hash -> block id
        # Free, never-cached blocks as a byte map (1 = free): a run of n such blocks is one
        # C-speed find(). Runs matter: the GPU attention reads consecutive blocks as one
        # zero-copy view and must gather anything more fragmented.
        self._uncached = bytearray(b"\x01") * num_blocks
        self._num_uncached = num_blocks
        self._free_cached: "OrderedDict[int, None]" = OrderedDict()

    @property
    def num_free(self) -> int:
        return self._num_uncached + len(self._free_cached)

    @property
    def num_cached_free(self) -> int:
        return len(self._free_cached)

    def allocate(self, n: int, after: Optional[int] = None, upcoming: int = 0) -> List[int]:
        """Take n free blocks, consecutive where possible: the never-cached blocks right
        after `after` (the request's last block), then the first run of never-cached blocks
        long enough for the rest, then never-cached blocks in address order, and only then
        evict cached blocks, least recently used first.

        upcoming: blocks the caller will ask for soon (the rest of a prompt being read).
        When cached blocks must be evicted, up to that many more are evicted now, together:
        least-recently-used blocks come in descending runs (requests release tail first), so
        evicting a step's worth at a time would hand a long prompt runs in reverse order, each
        a separate piece for the attention; evicted together they form one ascending run."""
        assert n <= self.num_free, "caller must check capacity first"
        short = n - self._num_uncached
        if short > 0:
            self._evict(min(len(self._free_cached), short + upcoming))
        out: List[int] = []
        block = after + 1 if after is not None else self.num_blocks
        while len(out) < n and block < self.num_blocks and self._uncached[block]:
            self._take_uncached(block, 1, out)
            block += 1
        need = n - len(out)
        if 1 < need <= self._num_uncached:
            start = self._uncached.find(b"\x01" * need)
            if start >= 0:
                self._take_uncached(start, need, out)
        position = 0
        while len(out) < n and self._num_uncached:
            position = self._uncached.find(b"\x01", position)
            self._take_uncached(position, 1, out)
        for block in out:
            self.ref_counts[block] = 1
        return out

    def _evict(self, count: int) -> None:
        """Turn the `count` least recently used cached-free blocks into plain free blocks."""
        for _ in range(count):
            block, _ = self._free_cached.popitem(last=False)
            del self.cached[self.block_hash[block]]
            self.block_hash[block] = None
            self._uncached[block] = 1
        self._num_uncached += count

    def _take_uncached(self, start: int, count: int, out: List[int]) -> None:
        self._uncached[start:start + count] = bytes(count)
        self._num_uncached -= count
        out.extend(range(start, start + count))

    def touch(self, block: int) -> None:
        """Take a reference on a cached block (a prefix-cache hit)."""
        if self.ref_counts[block] == 0:
            del self._free_cached[block]
        self.ref_counts[block] += 1

    def release(self, blocks: Sequence[int]) -> None:
        # Release tail blocks first so they are evicted before the shared prefix.
        for block in reversed(blocks):
            self.ref_counts[block] -= 1
            assert self.ref_counts[block] >= 0
            if self.ref_counts[block] == 0:
                if self.block_hash[block] is not None:
                    self._free_cached[block] = None
                else:
                    self._uncached[block] = 1
                    self._num_uncached += 1

    def register(self, block: int, block_hash: bytes) -> None:
        """Make a full, computed block findable by its hash (first writer wins)."""
        if block_hash in self.cached or self.block_hash[block] is not None:
            return
        self.cached[block_hash] = block
        self.block_hash[block] = block_hash

    def lookup(self, block_hash: bytes) -> Optional[int]:
        return self.cached.get(block_hash)

    def reset_cache(self) -> None:
        """Forget all cached-but-free blocks (they become plain free blocks)."""
        for block in list(self._free_cached):
            del self.cached[self.block_hash[block]]
            self.block_hash[block] = None
            self._uncached[block] = 1
        self._num_uncached += len(self._free_cached)
        self._free_cached.clear()


class KVCacheManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True):
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.pool = BlockPool(num_blocks)
        self.prefix_cache_queries = 0   # tokens looked up (vLLM counts tokens)
        self.prefix_cache_hits = 0      # tokens found

    @property
    def num_blocks(self) -> int:
        return self.pool.num_blocks

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def _hash_full_blocks(self, request: Request, upto_tokens: int) -> None:
        """Extend request.block_hashes to cover every full block below `upto_tokens`."""
        bs = self.block_size
        first, last = len(request.block_hashes), upto_tokens // bs
        if first >= last:
            return
        # One int64 conversion for all the blocks (a 241K prompt has 15K of them).
        data = memoryview(array("q", request.all_token_ids[first * bs:last * bs]).tobytes())
        width = bs * 8                      # int64 bytes per block
        parent = request.block_hashes[first - 1] if first else None
        for i in range(first, last):
            start = i * bs
            extra = block_extra_keys(request, start, start + bs) if request.mm_items else ()
            parent = hash_block(parent, data[(i - first) * width:(i - first + 1) * width], extra)
            request.block_hashes.append(parent)

    def hash_prompt(self, request: Request) -> None:
        """Hash the prompt's full blocks now (call on the submitting thread): a 128K-token
        prompt is ~8K hashes, which would otherwise stall the engine loop at admission."""
        if self.enable_prefix_caching:
            self._hash_full_blocks(request, (request.num_tokens - 1) // self.block_size * self.block_size)

    def find_cached_prefix(self, request: Request) -> List[int]:
        """Blocks holding the longest cached prefix. The last token is always recomputed."""
        if not self.enable_prefix_caching:
            return []
        limit = (request.num_tokens - 1) // self.block_size
        self._hash_full_blocks(request, limit * self.block_size)
        hits = []
        for block_hash in request.block_hashes[:limit]:
            block = self.pool.lookup(block_hash)
            if block is None:
                break
            hits.append(block)
        return hits

    def record_lookup(self, request: Request, num_hit_blocks: int) -> None:
        """Count an admitted request's lookup in the engine-wide hit-rate counters."""
        if self.enable_prefix_caching:
            self.prefix_cache_queries += request.num_tokens
            self.prefix_cache_hits += num_hit_blocks * self.block_size

    def can_allocate(self, request: Request, num_new_tokens: int, cached_blocks: Sequence[int] = ()) -> bool:
        needed_total = self.blocks_for(request.num_computed_tokens + num_new_tokens)
        needed = needed_total - len(request.block_ids) - len(cached_blocks)
        # Hits sitting in the free-cached list stop being free once taken.
        free = self.pool.num_free - sum(1 for b in cached_blocks if self.pool.ref_counts[b] == 0)
        return needed <= free

    def allocate(self, request: Request, num_new_tokens: int, cached_blocks: Sequence[int] = ()) -> bool:
        """Give `request` room for num_new_tokens more tokens (after its cached prefix)."""
        if not self.can_allocate(request, num_new_tokens, cached_blocks):
            return False
        for block in cached_blocks:
            self.pool.touch(block)
        request.block_ids.extend(cached_blocks)
        needed = self.blocks_for(request.num_computed_tokens + num_new_tokens) - len(request.block_ids)
        if needed > 0:
            last = request.block_ids[-1] if request.block_ids else None
            # The rest of a prompt being read (capped: a long prompt's runs need not be longer).
            upcoming = min(self.blocks_for(request.num_prompt_tokens) - len(request.block_ids) - needed,
                           self.blocks_for(UPCOMING_TOKENS_CAP))
            request.block_ids.extend(self.pool.allocate(needed, after=last, upcoming=max(0, upcoming)))
        return True

    def cache_computed_blocks(self, request: Request) -> None:
        """Register every block that is full and computed, so later prompts can reuse it."""
        if not self.enable_prefix_caching:
            return
        num_full = request.num_computed_tokens // self.block_size
        if num_full <= request.num_registered_blocks:
            return
        self._hash_full_blocks(request, num_full * self.block_size)
        for i in range(request.num_registered_blocks, num_full):
            self.pool.register(request.block_ids[i], request.block_hashes[i])
        request.num_registered_blocks = num_full

    def free(self, request: Request) -> None:
        self.pool.release(request.block_ids)
        request.block_ids = []
        request.num_registered_blocks = 0

    def reset_prefix_cache(self) -> None:
        self.pool.reset_cache()
