"""Prefix caching keyed by image content: a different image with the same text never reuses the
image's KV; the same image re-sent (as a PIL image or a file) does."""
from engine import SamplingParams
from engine.multimodal import image_content_hash

from .vision_models import cpu_engine, random_image

BLOCK = 4
PARAMS = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True, logprobs=3)
IMAGE_A = random_image(196, 140, seed=7)
IMAGE_B = random_image(196, 140, seed=8)     # same size, same token count, other pixels


def ask(image):
    return [{"role": "user", "content": [{"type": "text", "text": "Here is the scan you asked about:"},
                                         {"type": "image", "image": image},
                                         {"type": "text", "text": "What does it show?"}]}]


def test_content_hash_follows_pixels_not_size():
    assert image_content_hash(IMAGE_A) == image_content_hash(IMAGE_A.copy())
    assert image_content_hash(IMAGE_A) != image_content_hash(IMAGE_B)
    assert image_content_hash(IMAGE_A) != image_content_hash(IMAGE_A.convert("L").convert("RGB"))


def test_different_image_same_text_stops_before_the_image(vl_dirs):
    with cpu_engine(vl_dirs["qwen2_vl"], block_size=BLOCK) as engine:
        _, ids, items = engine._parse(ask(IMAGE_A))
        first_image_block = items[0].offset // BLOCK
        a = engine.chat(ask(IMAGE_A), PARAMS)[0]
        b = engine.chat(ask(IMAGE_B), PARAMS)[0]
        assert a.prompt_token_ids == b.prompt_token_ids                   # identical token ids
        assert a.num_cached_tokens == 0
        assert b.num_cached_tokens == first_image_block * BLOCK > 0       # the text before it only
        assert engine.stats()["num_images_encoded"] == 2
        # A different answer path: the first sampled token's log-probs differ.
        top_a, top_b = a.outputs[0].logprobs[0], b.outputs[0].logprobs[0]
        assert {t: round(p.logprob, 4) for t, p in top_a.items()} != {t: round(p.logprob, 4) for t, p in top_b.items()}


def test_same_image_resent_as_a_file_hits_the_cache(vl_dirs, tmp_path):
    path = tmp_path / "scan.png"
    IMAGE_A.save(path)
    with cpu_engine(vl_dirs["qwen2_vl"], block_size=BLOCK) as engine:
        first = engine.chat(ask(IMAGE_A), PARAMS)[0]
        predicted = engine.cached_prefix_tokens(ask(str(path)))
        again = engine.chat(ask(str(path)), PARAMS)[0]
        n = len(first.prompt_token_ids)
        assert again.num_cached_tokens == predicted == ((n - 1) // BLOCK) * BLOCK
        assert again.outputs[0].token_ids == first.outputs[0].token_ids
        assert engine.stats()["num_images_encoded"] == 1                   # not encoded again
        assert engine.cached_prefix_tokens(ask(IMAGE_B)) < again.num_cached_tokens
