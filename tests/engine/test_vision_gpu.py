"""Vision models on the GPU path (CUDA attention, workspace forward, CUDA-graph decodes with
M-RoPE-shifted positions) vs transformers, float32 — runs only where CUDA exists."""
import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU here: the vision GPU path is checked on the device machine; its CPU "
                "twin (workspace forward) is checked by test_vision_parity.py", allow_module_level=True)

from engine import Engine, SamplingParams  # noqa: E402

from .test_vision_parity import IMAGES, messages  # noqa: E402
from .tiny_models import SMALL_GPU_ENGINE  # noqa: E402
from .vision_models import reference_greedy, reference_inputs  # noqa: E402


@pytest.mark.parametrize("kind", ["qwen2_vl", "qwen2_5_vl"])
@pytest.mark.parametrize("graphs", [False, True])
def test_gpu_float32_greedy_with_images_matches_transformers(vl_dirs, vl_references, kind, graphs):
    params = SamplingParams(max_tokens=16, temperature=0, ignore_eos=True)
    with Engine(model=str(vl_dirs[kind]), cuda_graphs=graphs, **SMALL_GPU_ENGINE) as engine:
        assert engine.runner.attention.name == "cuda" and engine.runner.workspace is not None
        assert (engine.runner.graphs is not None) == graphs
        conversations = [messages(IMAGES[:1]), messages(IMAGES), messages(IMAGES[1:], "Only this one?")]
        outs = engine.chat(conversations, params)
        for conversation, out in zip(conversations, outs):
            images = [part["image"] for part in conversation[0]["content"] if part["type"] == "image"]
            inputs = reference_inputs(vl_dirs[kind], out.prompt_token_ids, images, engine.hf_config.image_token_id)
            assert out.outputs[0].token_ids == reference_greedy(vl_references[kind], inputs, 16)
        stats = engine.stats()
        assert stats["vision_cache_tokens_free"] == stats["vision_cache_tokens_total"]
        assert stats["kv_blocks_free"] == stats["kv_blocks_total"]
