"""Block pool and prefix-cache bookkeeping."""

from engine import Engine, SamplingParams
from engine.config import SamplingParams as SP
from engine.kv_cache import BlockPool, KVCacheManager, hash_block
from engine.request import MultiModalItem, Request


def make_request(tokens, mm=None, rid="r"):
    return Request(rid, tokens, SP(), mm_items=mm)


def cache_and_free(kv, tokens, rid):
    """A request that computed all of `tokens`, cached its full blocks and finished."""
    request = make_request(tokens, rid=rid)
    assert kv.allocate(request, len(tokens))
    request.num_computed_tokens = len(tokens)
    kv.cache_computed_blocks(request)
    kv.free(request)
    return request


def test_hash_chains_parent_tokens_and_extra_keys():
    a = hash_block(None, [1, 2, 3, 4], [])
    assert a == hash_block(None, [1, 2, 3, 4], [])
    assert a != hash_block(None, [1, 2, 3, 5], [])
    assert hash_block(a, [5, 6], []) != hash_block(None, [5, 6], [])
    assert hash_block(None, [1, 2], ["img-a"]) != hash_block(None, [1, 2], ["img-b"])


def test_images_change_block_hashes_only_where_they_overlap():
    kv = KVCacheManager(num_blocks=16, block_size=4)
    tokens = list(range(20))
    plain = make_request(tokens)
    with_a = make_request(tokens, [MultiModalItem(offset=5, length=4, content_hash="A")])
    with_b = make_request(tokens, [MultiModalItem(offset=5, length=4, content_hash="B")])
    for r in (plain, with_a, with_b):
        kv._hash_full_blocks(r, 20)
    assert plain.block_hashes[0] == with_a.block_hashes[0] == with_b.block_hashes[0]
    assert with_a.block_hashes[1] != with_b.block_hashes[1]       # blocks 1-2 hold the image
    assert with_a.block_hashes[2] != with_b.block_hashes[2]
    assert with_a.block_hashes[3] != with_b.block_hashes[3]       # chained after the image


def test_pool_states_and_lru_eviction():
    pool = BlockPool(4)
    blocks = pool.allocate(3)
    for i, b in enumerate(blocks):
        pool.register(b, bytes([i]))
    pool.release(blocks)                   # released tail-first: block 2 is evicted first
    assert pool.num_free == 4 and pool.num_cached_free == 3
    fresh = pool.allocate(1)               # the never-cached block goes first
    assert fresh[0] not in blocks and pool.num_cached_free == 3
    evicted = pool.allocate(1)[0]
    assert evicted == blocks[2] and pool.lookup(bytes([2])) is None
    assert pool.lookup(bytes([0])) == blocks[0]
    pool.touch(blocks[0])                  # a hit takes it out of the free list
    assert pool.num_free == 1 and pool.ref_counts[blocks[0]] == 1


def test_allocation_accounts_for_cached_free_hits():
    kv = KVCacheManager(num_blocks=4, block_size=4)
    cache_and_free(kv, list(range(13)), "a")
    assert kv.num_free_blocks == 4
    second = make_request(list(range(13)) + [99, 98, 97], rid="b")      # 16 tokens, 4 blocks
    hits = kv.find_cached_prefix(second)
    assert len(hits) == 3
    second.num_computed_tokens = 12
    assert not kv.can_allocate(second, 4 + 4, hits)   # 3 hits + 2 new blocks > 1 free
    assert kv.allocate(second, 4, hits)                # 3 hits + the 1 uncached block
    assert kv.num_free_blocks == 0
    kv.free(second)
    assert kv.num_free_blocks == 4


def test_three_block_shared_prefix_reports_cached_tokens(llama_dir):
    with Engine(model=str(llama_dir), block_size=16) as engine:
        shared = list(range(5, 5 + 48))
        a = engine.generate([shared + [100, 101, 102]], SamplingParams(max_tokens=2, temperature=0))[0]
        b = engine.generate([shared + [200, 201]], SamplingParams(max_tokens=2, temperature=0))[0]
        assert a.num_cached_tokens == 0
        assert b.num_cached_tokens == 3 * 16
        stats = engine.stats()
        assert stats["prefix_cache_hits"] == 48
        assert stats["prefix_cache_queries"] == len(shared) + 3 + len(shared) + 2
        assert stats["kv_blocks_free"] == stats["kv_blocks_total"]


def test_prefix_caching_can_be_disabled(llama_dir):
    with Engine(model=str(llama_dir), enable_prefix_caching=False) as engine:
        prompt = list(range(5, 60))
        engine.generate([prompt], SamplingParams(max_tokens=2, temperature=0))
        again = engine.generate([prompt], SamplingParams(max_tokens=2, temperature=0))[0]
        assert again.num_cached_tokens == 0
        assert engine.cached_prefix_tokens(prompt) == 0


def test_cached_prefix_probe_predicts_hit(llama_dir):
    with Engine(model=str(llama_dir), block_size=8) as engine:
        prompt = list(range(5, 45))
        assert engine.cached_prefix_tokens(prompt) == 0
        engine.generate([prompt], SamplingParams(max_tokens=1, temperature=0))
        predicted = engine.cached_prefix_tokens(prompt)
        actual = engine.generate([prompt], SamplingParams(max_tokens=1, temperature=0))[0].num_cached_tokens
        assert predicted == actual == 32


def test_reset_prefix_cache_makes_the_next_read_cold(llama_dir):
    import time
    with Engine(model=str(llama_dir), block_size=8) as engine:
        prompt = list(range(5, 45))
        engine.generate([prompt], SamplingParams(max_tokens=1, temperature=0))
        assert engine.cached_prefix_tokens(prompt) == 32
        engine.reset_prefix_cache()
        deadline = time.time() + 5
        while engine.cached_prefix_tokens(prompt):
            assert time.time() < deadline
            time.sleep(0.01)
        again = engine.generate([prompt], SamplingParams(max_tokens=1, temperature=0))[0]
        assert again.num_cached_tokens == 0
        stats = engine.stats()
        assert stats["kv_blocks_free"] == stats["kv_blocks_total"]


def test_blocks_come_in_runs_after_churn():
    """Freed blocks return in any order; a long prompt still gets consecutive blocks (the
    GPU attention reads runs as zero-copy views and must gather anything else)."""
    kv = KVCacheManager(num_blocks=80, block_size=4)
    users = [make_request(list(range(10 * i, 10 * i + 30)), rid=f"u{i}") for i in range(4)]
    for user in users:
        assert kv.allocate(user, 30)                  # 8 blocks each
    for user in (users[2], users[0]):
        kv.free(user)                                 # released tail first, in reverse
    long = make_request(list(range(200)), rid="long")
    for chunk in range(0, 200, 48):                   # chunked prefill: blocks per chunk
        assert kv.allocate(long, min(48, 200 - chunk))
        long.num_computed_tokens = min(chunk + 48, 200)
    runs = sum(1 for a, b in zip(long.block_ids, long.block_ids[1:]) if b != a + 1) + 1
    assert len(long.block_ids) == 50 and len(set(long.block_ids)) == 50
    assert runs <= 2, long.block_ids
    kv.free(long)
    for user in (users[1], users[3]):
        kv.free(user)
    assert kv.num_free_blocks == 80


def test_evicted_cached_blocks_come_back_in_address_order():
    kv = KVCacheManager(num_blocks=12, block_size=4)
    cache_and_free(kv, list(range(48)), "a")         # all 12 cached, LRU order reversed
    second = make_request(list(range(100, 140)), rid="b")
    assert kv.allocate(second, 40)                   # evicts 10 cached blocks
    assert second.block_ids == sorted(second.block_ids)


def test_a_long_prompt_evicting_a_cached_document_gets_long_runs():
    """The pool is full of a finished document's cached blocks (released tail first, so
    least recently used runs backwards). A long prompt read chunk by chunk evicts ahead
    (the rest of its prompt, capped) instead of one chunk's worth at a time, which would
    give it one reversed run per chunk: each a separate piece for the GPU attention."""
    from engine.kv_cache import UPCOMING_TOKENS_CAP
    block = UPCOMING_TOKENS_CAP // 64                 # 64 blocks per capped eviction
    kv = KVCacheManager(num_blocks=300, block_size=block)
    cache_and_free(kv, list(range(300 * block)), "document")
    long = make_request(list(range(10**6, 10**6 + 280 * block)), rid="long")
    chunk = 8 * block                                 # 8 blocks per step
    for start in range(0, 280 * block, chunk):
        assert kv.allocate(long, chunk)
        long.num_computed_tokens = start + chunk
    runs = sum(1 for a, b in zip(long.block_ids, long.block_ids[1:]) if b != a + 1) + 1
    assert len(set(long.block_ids)) == 280 and runs <= 280 // 64 + 2, runs
    assert kv.num_free_blocks == 20 and kv.pool.num_cached_free == 20   # evicted only what it used
    kv.free(long)
    assert kv.num_free_blocks == 300
