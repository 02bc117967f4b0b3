"""Vision models vs transformers (float32): logits and greedy tokens with one and two images,
with chunk budgets that split an image's positions across steps, and with prefix-cache hits."""
import pytest
import torch

from engine import SamplingParams
from engine.scheduler import ScheduledChunk
from engine.vision_schedule import plan_images, reserve_images

from .vision_models import (cpu_engine, random_image, reference_greedy, reference_inputs,
                            reference_logits)

KINDS = ["qwen2_vl", "qwen2_5_vl"]
GREEDY = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
# Two images of different sizes and aspect ratios: 5x7 and 3x11 merged patches.
IMAGES = [random_image(200, 150, seed=1), random_image(300, 90, seed=2)]


def messages(images, question="Describe the pictures."):
    parts = [{"type": "text", "text": "Look:"}]
    for image in images:
        parts += [{"type": "image", "image": image}, {"type": "text", "text": " and "}]
    return [{"role": "user", "content": parts + [{"type": "text", "text": question}]}]


def engine_request(engine, prompt):
    """A request as submit() builds it, for driving the runner directly."""
    from engine.request import Request
    text, ids, items = engine._parse(prompt)
    request = Request("probe", ids, SamplingParams(), prompt=text, mm_items=items)
    engine.vision.attach(request)
    return request


def prompt_logits(engine, request, chunk, upto=None):
    """Logits of prompt positions [0, upto), computed `chunk` tokens a step through the paged
    KV cache and the vision pool, reserving and releasing image rows as the scheduler does.
    Computed full blocks are registered in the prefix cache; then the request is dropped."""
    cache, rows = engine.vision.cache, []
    upto = request.num_prompt_tokens if upto is None else upto
    while request.num_computed_tokens < upto:
        n = min(chunk, upto - request.num_computed_tokens)
        plan = plan_images(cache, request, n, may_reserve=True)
        assert engine.kv.allocate(request, plan.kv_tokens)
        reserve_images(cache, plan)
        start = request.num_computed_tokens
        rows.append(engine.runner.prompt_logits([ScheduledChunk(request, start, plan.num_tokens)]))
        request.num_computed_tokens = start + plan.num_tokens
        cache.release_computed(request)
        engine.kv.cache_computed_blocks(request)
    engine.kv.free(request)
    cache.release_request(request)
    assert cache.num_free_tokens == cache.capacity_tokens
    return torch.cat(rows)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("num_images", [1, 2])
def test_prompt_logits_match_transformers(vl_dirs, vl_references, kind, num_images):
    images = IMAGES[:num_images]
    with cpu_engine(vl_dirs[kind]) as engine:
        request = engine_request(engine, messages(images))
        item = request.mm_items[0]
        inputs = reference_inputs(vl_dirs[kind], request.prompt_token_ids, images, engine.hf_config.image_token_id)
        ref = reference_logits(vl_references[kind], inputs)
        # chunk 7 splits every image's positions across several steps
        for chunk in (request.num_prompt_tokens, 7, item.offset + 3):
            request.num_computed_tokens = 0
            ours = prompt_logits(engine, request, chunk)
            rel = (ours - ref).norm() / ref.norm()
            assert rel < 1e-4, f"chunk={chunk}: relative error {rel:.2e}"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("budget", [5, 16, 4096])
def test_greedy_matches_transformers(vl_dirs, vl_references, kind, budget):
    with cpu_engine(vl_dirs[kind], max_num_batched_tokens=budget) as engine:
        for images in (IMAGES[:1], IMAGES):
            out = engine.chat(messages(images), GREEDY)[0]
            assert out.error is None
            inputs = reference_inputs(vl_dirs[kind], out.prompt_token_ids, images, engine.hf_config.image_token_id)
            assert out.outputs[0].token_ids == reference_greedy(vl_references[kind], inputs, GREEDY.max_tokens)
        stats = engine.stats()
        assert stats["num_images_encoded"] == 2      # the second prompt's first image was a cache hit
        assert stats["vision_cache_tokens_free"] == stats["vision_cache_tokens_total"]


@pytest.mark.parametrize("kind", KINDS)
def test_prefix_cache_hit_through_images_gives_same_answer(vl_dirs, vl_references, kind):
    with cpu_engine(vl_dirs[kind], block_size=4, max_num_batched_tokens=9) as engine:
        first = engine.chat(messages(IMAGES), GREEDY)[0]
        second = engine.chat(messages(IMAGES), GREEDY)[0]
        n = len(first.prompt_token_ids)
        assert first.num_cached_tokens == 0
        assert second.num_cached_tokens == ((n - 1) // 4) * 4 > 0     # the hit covers both images
        inputs = reference_inputs(vl_dirs[kind], first.prompt_token_ids, IMAGES, engine.hf_config.image_token_id)
        expected = reference_greedy(vl_references[kind], inputs, GREEDY.max_tokens)
        assert first.outputs[0].token_ids == second.outputs[0].token_ids == expected
        assert engine.stats()["num_images_encoded"] == 2          # the re-sent images were not re-encoded


def test_cache_hit_ending_inside_an_image_encodes_it_again(vl_dirs, vl_references):
    """A cached prefix that stops mid-image: the image's remaining positions need its rows."""
    kind = "qwen2_vl"
    with cpu_engine(vl_dirs[kind], block_size=4) as engine:
        prompt = messages(IMAGES[:1])
        request = engine_request(engine, prompt)
        item = request.mm_items[0]
        prompt_logits(engine, request, chunk=5, upto=item.offset + item.length // 2)
        assert engine.stats()["num_images_encoded"] == 1
        out = engine.chat(prompt, GREEDY)[0]
        assert item.offset < out.num_cached_tokens < item.end
        assert engine.stats()["num_images_encoded"] == 2
        inputs = reference_inputs(vl_dirs[kind], out.prompt_token_ids, IMAGES[:1], engine.hf_config.image_token_id)
        assert out.outputs[0].token_ids == reference_greedy(vl_references[kind], inputs, GREEDY.max_tokens)


@pytest.mark.parametrize("kind", KINDS)
def test_text_only_prompt_matches_transformers(vl_dirs, vl_references, kind):
    with cpu_engine(vl_dirs[kind], max_num_batched_tokens=6) as engine:
        out = engine.chat([{"role": "user", "content": "No picture today, just words."}], GREEDY)[0]
        inputs = reference_inputs(vl_dirs[kind], out.prompt_token_ids, [], engine.hf_config.image_token_id)
        del inputs["mm_token_type_ids"]
        assert out.outputs[0].token_ids == reference_greedy(vl_references[kind], inputs, GREEDY.max_tokens)


@pytest.mark.parametrize("kind", KINDS)
def test_workspace_forward_matches_transformers(vl_dirs, vl_references, kind):
    """The GPU path's preallocated-workspace forward (run here on the CPU) with images."""
    with cpu_engine(vl_dirs[kind], use_workspace=True, workspace_slice_tokens=8,
                max_num_batched_tokens=16) as engine:
        assert engine.runner.workspace is not None
        out = engine.chat(messages(IMAGES), GREEDY)[0]
        inputs = reference_inputs(vl_dirs[kind], out.prompt_token_ids, IMAGES, engine.hf_config.image_token_id)
        assert out.outputs[0].token_ids == reference_greedy(vl_references[kind], inputs, GREEDY.max_tokens)
