"""The vision pool: no deadlock under contention, rows live exactly while their image is being
read into the KV cache, and preemption, abort and finish return both resources."""
import threading
import time

import pytest
import torch

from engine import SamplingParams
from engine.request import MultiModalItem, Request
from engine.vision_cache import VisionCache
from engine.vision_schedule import plan_images, reserve_images

from .vision_models import cpu_engine, random_image

LARGEST = 64 + 2                 # MAX_PIXELS allows 64 merged patches, plus 2 separators
KV_BYTES_PER_TOKEN = 2 * 2 * 2 * 16 * 4     # layers * (k, v) * kv_heads * head_dim * float32


def largest_image(seed):
    return random_image(224, 224, seed)           # 8x8 merged patches: the largest admissible


def ask(image, question):
    return [{"role": "user", "content": [{"type": "text", "text": question},
                                         {"type": "image", "image": image},
                                         {"type": "text", "text": "Describe it."}]}]


def submit_together(engine, prompts, params):
    """Queue all requests before the engine loop sees any (its lock is reentrant for submit)."""
    with engine._cv:
        return [engine.submit(prompt, params) for prompt in prompts]


def finish(engine, request_ids):
    return [list(engine.outputs(rid))[-1] for rid in request_ids]


def check_lifetimes_every_step(engine, violations, blocked):
    """After every step: an image's rows are held iff some but not all of its positions are in
    the KV cache, and a holder already has KV blocks through the image's end."""
    cache, bs = engine.vision.cache, engine.config.block_size
    original_step, original_plan = engine.step, engine.scheduler._plan

    def step():
        original_step()
        for request in list(engine.scheduler.running) + list(engine.scheduler.waiting):
            for item in request.mm_items:
                reading = item.offset < request.num_computed_tokens < item.end
                if cache.holds(item) != reading:
                    violations.append(f"{request.request_id}: held={cache.holds(item)} reading={reading}")
                if cache.holds(item) and len(request.block_ids) * bs < item.end:
                    violations.append(f"{request.request_id} holds image rows but lacks KV blocks")
        if cache.num_used_tokens > cache.capacity_tokens:
            violations.append("pool over capacity")

    def plan(request, num_new):
        result = original_plan(request, num_new)
        blocked.append(result.blocked)
        return result

    engine.step, engine.scheduler._plan = step, plan


def test_plan_reads_text_up_to_an_image_that_does_not_fit():
    cache = VisionCache(capacity_tokens=10, hidden_size=4, device="cpu", dtype=torch.float32)
    image_a, image_b = MultiModalItem(5, 8, "a"), MultiModalItem(20, 6, "b")
    request = Request("r", list(range(40)), SamplingParams(), mm_items=[image_a, image_b])
    plan = plan_images(cache, request, num_new=16, may_reserve=True)
    # Image a fits: the chunk keeps its 16 tokens, KV is needed through a's end (13 < 16).
    assert (plan.num_tokens, plan.kv_tokens, plan.new_items, plan.blocked) == (16, 16, [image_a], False)
    reserve_images(cache, plan)
    request.num_computed_tokens = 16
    plan = plan_images(cache, request, num_new=16, may_reserve=True)
    assert (plan.num_tokens, plan.kv_tokens, plan.blocked) == (4, 4, True)     # b waits: stop at 20
    cache.release_computed(request)                # a is fully computed: its rows go back
    plan = plan_images(cache, request, num_new=5, may_reserve=True)
    # b fits now; the chunk ends inside b, but KV is allocated through b's end (26).
    assert (plan.num_tokens, plan.kv_tokens, plan.new_items) == (5, 10, [image_b])
    assert plan_images(cache, request, num_new=5, may_reserve=False).num_tokens == 4   # turnstile closed


@pytest.mark.parametrize("concurrency", [2, 4, 8])
def test_concurrent_largest_images_never_deadlock(vl_dirs, concurrency):
    # The pool holds ONE largest image; the KV cache about two prompts; chunks split images.
    with cpu_engine(vl_dirs["qwen2_vl"], vision_cache_tokens=LARGEST, block_size=4,
                max_num_batched_tokens=16, kv_cache_memory=KV_BYTES_PER_TOKEN * 4 * 48) as engine:
        assert engine.stats()["max_image_tokens"] == LARGEST
        violations, blocked = [], []
        check_lifetimes_every_step(engine, violations, blocked)
        # At most 6 tokens per request per step: the 16-token budget is shared by several
        # requests at once, so they reach their images together and must queue for the pool.
        limit = engine.scheduler._limit
        engine.scheduler._limit = lambda request, num_new: min(limit(request, num_new), 6)
        prompts = [ask(largest_image(seed=10 + i), f"Picture number {i}:") for i in range(concurrency)]
        params = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
        results, request_ids = [], submit_together(engine, prompts, params)
        worker = threading.Thread(target=lambda: results.extend(finish(engine, request_ids)), daemon=True)
        worker.start()
        worker.join(timeout=60)                                   # the watchdog
        assert not worker.is_alive(), f"deadlock: {engine.stats()}"
        assert all(o.error is None and len(o.outputs[0].token_ids) == 6 for o in results)
        assert not violations, violations[:5]
        assert any(blocked), "the test must make images wait for the pool"
        stats = engine.stats()
        assert stats["vision_cache_tokens_peak"] == LARGEST            # one image at a time
        assert stats["num_images_encoded"] >= concurrency
        assert stats["vision_cache_tokens_free"] == stats["vision_cache_tokens_total"]
        assert stats["vision_cache_items"] == 0
        assert stats["kv_blocks_free"] == stats["kv_blocks_total"]


def test_preemption_releases_rows_and_answers_stay_the_same(vl_dirs):
    prompts = [ask(largest_image(seed=30 + i), f"Number {i}") for i in range(3)]
    params = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)
    with cpu_engine(vl_dirs["qwen2_vl"], block_size=4, max_num_batched_tokens=24) as engine:
        serial = [engine.chat(p, params)[0].outputs[0].token_ids for p in prompts]
    with cpu_engine(vl_dirs["qwen2_vl"], block_size=4, max_num_batched_tokens=24,
                enable_prefix_caching=False, kv_cache_memory=KV_BYTES_PER_TOKEN * 4 * 56) as engine:
        violations, blocked = [], []
        check_lifetimes_every_step(engine, violations, blocked)
        outs = finish(engine, submit_together(engine, prompts, params))
        stats = engine.stats()
        assert stats["num_preemptions"] > 0, "the test must actually preempt"
        assert [o.outputs[0].token_ids for o in outs] == serial
        assert not violations, violations[:5]
        assert stats["vision_cache_tokens_free"] == stats["vision_cache_tokens_total"]
        assert stats["kv_blocks_free"] == stats["kv_blocks_total"]


def test_abort_mid_image_returns_rows_and_blocks(vl_dirs):
    with cpu_engine(vl_dirs["qwen2_vl"], block_size=4, max_num_batched_tokens=4) as engine:
        seen, original_step = {}, engine.step

        def step():          # on the engine thread: abort exactly when the image is half read
            original_step()
            for request in engine.scheduler.running:
                item = request.mm_items[0]
                if not seen and item.offset + 20 < request.num_computed_tokens < item.end:
                    seen["held"] = engine.vision.cache.holds(item)
                    engine.abort(request.request_id)

        engine.step = step
        out = engine.generate(ask(largest_image(seed=50), "Abort me"), SamplingParams(max_tokens=5))[0]
        assert out.outputs[0].finish_reason == "abort" and seen["held"]
        deadline = time.time() + 5
        while engine.stats()["vision_cache_tokens_free"] != engine.stats()["vision_cache_tokens_total"] or \
                engine.stats()["kv_blocks_free"] != engine.stats()["kv_blocks_total"]:
            assert time.time() < deadline
            time.sleep(0.01)
