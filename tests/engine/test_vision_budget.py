"""Image token accounting: one count (placeholders + separators) everywhere, the budget's exact
boundary, and clear refusals at submission that never reach the device."""
import pytest

from engine import RequestRejected, SamplingParams
from engine.errors import ImageTooLargeError
from engine.multimodal import image_token_count, largest_image_grid

from .vision_models import MAX_PIXELS, cpu_engine, random_image

PARAMS = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
# Sides are multiples of 28, so the processor keeps them: 4x6 and 5x5 merged patches.
IMAGE_26 = random_image(168, 112, seed=3)        # 24 placeholders + 2 separators = 26 tokens
IMAGE_27 = random_image(140, 140, seed=4)        # 25 placeholders + 2 separators = 27 tokens


def ask(image, question="What is this?"):
    return [{"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": question}]}]


def count_encoder_calls(engine):
    model, calls = engine.runner.model, []
    original = model.encode_image

    def encode_image(pixels, grid_thw):
        calls.append(tuple(grid_thw))
        return original(pixels, grid_thw)

    model.encode_image = encode_image
    return calls


def test_token_count_includes_both_separators():
    assert image_token_count((1, 64, 64), 2) == 1024 + 2       # the seed's image: not 1024, not 1025
    assert image_token_count((1, 8, 12), 2) == 24 + 2
    assert image_token_count(largest_image_grid(MAX_PIXELS, 14, 2), 2) == 64 + 2
    with pytest.raises(ValueError):
        image_token_count((1, 7, 8), 2)


def test_prompt_builder_expands_to_exactly_that_count(vl_dirs):
    with cpu_engine(vl_dirs["qwen2_vl"]) as engine:
        with_image = engine.count_tokens(ask(IMAGE_26))
        without = engine.count_tokens([{"role": "user", "content": "What is this?"}])
        assert with_image - without == 26
        _, ids, items = engine._parse(ask(IMAGE_26))
        assert items[0].length == 26 and ids[items[0].offset] == engine.hf_config.vision_start_token_id
        assert ids[items[0].end - 1] == engine.hf_config.vision_end_token_id
        assert ids.count(engine.hf_config.image_token_id) == 24


def test_image_exactly_on_the_budget_is_answered_one_more_token_is_refused(vl_dirs):
    with cpu_engine(vl_dirs["qwen2_vl"], max_image_tokens=26) as engine:
        calls = count_encoder_calls(engine)
        out = engine.chat(ask(IMAGE_26), PARAMS)[0]
        assert out.error is None and len(out.outputs[0].token_ids) == 4
        assert calls == [(1, 8, 12)]

        steps = engine.num_steps
        with pytest.raises(ImageTooLargeError) as err:
            engine.submit(ask(IMAGE_27), PARAMS)
        message = str(err.value)
        assert "image 1 (140x140 RGB)" in message and "27 tokens" in message
        assert "limit is 26 (max_image_tokens)" in message and "raise max_image_tokens" in message
        assert calls == [(1, 8, 12)], "the refused image must never reach the encoder"
        assert engine.num_steps == steps and engine.stats()["num_waiting"] == 0


def test_same_image_one_token_over_a_smaller_budget_is_refused(vl_dirs):
    with cpu_engine(vl_dirs["qwen2_vl"], max_image_tokens=25) as engine:
        calls = count_encoder_calls(engine)
        with pytest.raises(ImageTooLargeError, match="26 tokens .* limit is 25"):
            engine.chat(ask(IMAGE_26), PARAMS)
        assert calls == [] and engine.num_steps == 0


def test_refusal_names_the_binding_setting(vl_dirs):
    second = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image", "image": IMAGE_26},
                                           {"type": "image", "image": IMAGE_27}]}]
    with cpu_engine(vl_dirs["qwen2_vl"], max_image_tokens=26) as engine:
        with pytest.raises(ImageTooLargeError, match=r"^image 2 \(140x140 RGB\) needs 27"):
            engine.submit(second, PARAMS)
    with cpu_engine(vl_dirs["qwen2_vl"], max_model_len=20) as engine:
        with pytest.raises(ImageTooLargeError, match="max_model_len"):
            engine.submit(ask(IMAGE_26), PARAMS)


def test_vision_pool_smaller_than_one_image_fails_at_start(vl_dirs):
    with pytest.raises(ValueError, match="vision_cache_tokens=30 cannot hold one image of max_image_tokens=66"):
        cpu_engine(vl_dirs["qwen2_vl"], vision_cache_tokens=30)


def test_vllm_style_prompt_equals_chat_messages(vl_dirs):
    with cpu_engine(vl_dirs["qwen2_vl"]) as engine:
        text = engine.apply_chat_template([{"role": "user", "content": [{"type": "image"},
                                                                        {"type": "text", "text": "What is this?"}]}])
        assert "<|vision_start|><|image_pad|><|vision_end|>" in text
        via_dict = engine.generate({"prompt": text, "multi_modal_data": {"image": [IMAGE_26]}}, PARAMS)[0]
        via_chat = engine.chat(ask(IMAGE_26), PARAMS)[0]
        assert via_dict.prompt_token_ids == via_chat.prompt_token_ids
        assert via_dict.outputs[0].token_ids == via_chat.outputs[0].token_ids


def test_placeholders_must_match_the_images(vl_dirs):
    with cpu_engine(vl_dirs["qwen2_vl"]) as engine:
        one = "<|vision_start|><|image_pad|><|vision_end|>What?"
        with pytest.raises(RequestRejected, match="1 image placeholder.*but 2 image"):
            engine.submit({"prompt": one, "multi_modal_data": {"image": [IMAGE_26, IMAGE_27]}}, PARAMS)
        with pytest.raises(RequestRejected, match="must be written"):
            engine.submit({"prompt": "<|image_pad|> What?", "multi_modal_data": {"image": IMAGE_26}}, PARAMS)
        with pytest.raises(RequestRejected, match="cannot be read"):
            engine.submit(ask("/no/such/picture.png"), PARAMS)


def test_text_model_rejects_images_clearly(llama_dir):
    with cpu_engine(llama_dir) as engine:
        assert not engine.supports_images
        with pytest.raises(RequestRejected, match="does not accept images: it has no vision tower"):
            engine.submit(ask(IMAGE_26), PARAMS)
        with pytest.raises(RequestRejected, match="does not accept images"):
            engine.submit({"prompt": "hi", "multi_modal_data": {"image": [IMAGE_26]}}, PARAMS)
        # Text-only content lists still work: their parts are joined for the text template.
        parts = [{"role": "user", "content": [{"type": "text", "text": "Paris is the capital of"}]}]
        assert engine.chat(parts, PARAMS)[0].outputs[0].token_ids == \
            engine.chat([{"role": "user", "content": "Paris is the capital of"}], PARAMS)[0].outputs[0].token_ids
