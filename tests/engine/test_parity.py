"""Our engine vs transformers on tiny random models, float32: every path gives the same answer."""
import pytest
import torch

from engine import Engine, SamplingParams
from engine.request import Request
from engine.scheduler import ScheduledChunk

from .tiny_models import load_reference, reference_greedy, save_tiny_model

PROMPT = "The quick brown fox jumps over the lazy dog. Paris is the capital of"
GREEDY = SamplingParams(max_tokens=32, temperature=0.0, ignore_eos=True)


def greedy_ids(engine, prompt_ids, params=GREEDY):
    return engine.generate([prompt_ids], params)[0].outputs[0].token_ids


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3"])
@pytest.mark.parametrize("budget", [1, 7, 64, 2048])
def test_greedy_matches_transformers(tiny_dirs, references, family, budget):
    with Engine(model=str(tiny_dirs[family]), max_num_batched_tokens=budget) as engine:
        prompt = engine.tokenizer(PROMPT)["input_ids"]
        assert len(prompt) > 7          # the prompt really is split into chunks
        expected = reference_greedy(references[family], prompt, 32)
        assert greedy_ids(engine, prompt) == expected


def _prompt_logits(engine, prompt_ids, chunk):
    """Logits of every prompt position computed `chunk` tokens at a time through the paged cache."""
    req = Request("probe", prompt_ids, SamplingParams())
    rows = []
    for start in range(0, len(prompt_ids), chunk):
        n = min(chunk, len(prompt_ids) - start)
        assert engine.kv.allocate(req, n)
        rows.append(engine.runner.prompt_logits([ScheduledChunk(req, start, n)]))
        req.num_computed_tokens = start + n
    engine.kv.free(req)
    return torch.cat(rows)


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3"])
def test_logits_match_transformers(tiny_dirs, references, family):
    with Engine(model=str(tiny_dirs[family])) as engine:
        prompt = engine.tokenizer(PROMPT)["input_ids"]
        with torch.no_grad():
            ref = references[family](torch.tensor([prompt])).logits[0].float()
        for chunk in (len(prompt), 5, 1):
            ours = _prompt_logits(engine, prompt, chunk)
            rel = (ours - ref).norm() / ref.norm()
            assert rel < 1e-4, f"chunk={chunk}: relative error {rel:.2e}"
            last_rel = ((ours[-1] - ref[-1]).abs() / ref[-1].abs().clamp_min(1e-3)).median()
            assert last_rel < 1e-4
        stats = engine.stats()
        assert stats["kv_blocks_free"] == stats["kv_blocks_total"]


def test_decode_logprobs_match_transformers(llama_dir, references):
    """Full-vocabulary log-probs of each decoded token equal transformers' log-softmax."""
    ref_model = references["llama"]
    with Engine(model=str(llama_dir), max_num_batched_tokens=5) as engine:
        prompt = engine.tokenizer(PROMPT)["input_ids"]
        vocab = engine.hf_config.vocab_size
        out = engine.generate([prompt], SamplingParams(max_tokens=4, temperature=0, ignore_eos=True,
                                                       logprobs=vocab))[0]
        tokens = out.outputs[0].token_ids
        with torch.no_grad():
            ref = ref_model(torch.tensor([prompt + tokens])).logits[0].float().log_softmax(-1)
        for step, lp in enumerate(out.outputs[0].logprobs):
            row = ref[len(prompt) - 1 + step]
            ours = torch.tensor([lp[t].logprob for t in range(vocab)])
            assert torch.allclose(ours, row, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_prefix_cache_hit_gives_same_answer(tiny_dirs, references, family):
    with Engine(model=str(tiny_dirs[family]), block_size=4, max_num_batched_tokens=16) as engine:
        prompt = engine.tokenizer(PROMPT)["input_ids"]
        expected = reference_greedy(references[family], prompt, 32)
        first = engine.generate([prompt], GREEDY)[0]
        second = engine.generate([prompt], GREEDY)[0]
        assert first.num_cached_tokens == 0
        assert second.num_cached_tokens == ((len(prompt) - 1) // 4) * 4 > 0
        assert first.outputs[0].token_ids == expected
        assert second.outputs[0].token_ids == expected
        # A prompt extending the first answer reuses the prompt *and* generated blocks.
        follow = prompt + first.outputs[0].token_ids + prompt[:5]
        third = engine.generate([follow], GREEDY)[0]
        assert third.num_cached_tokens >= len(prompt)
        assert third.outputs[0].token_ids == reference_greedy(references[family], follow, 32)


def test_forced_preemption_gives_same_answers(llama_dir, references):
    """A pool too small for all requests at once: the latest is preempted and recomputed."""
    per_token = 2 * 2 * 2 * 16 * 4          # layers * (k,v) * kv_heads * head_dim * fp32 bytes
    prompts_text = [PROMPT, "def main():\n    print('hello world')", "Berlin is the capital of", "Ünïcödé"]
    with Engine(model=str(llama_dir), block_size=4, kv_cache_memory=per_token * 4 * 30,
                max_num_batched_tokens=64) as engine:
        prompts = [engine.tokenizer(p)["input_ids"] for p in prompts_text]
        params = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)
        outs = engine.generate(prompts, params)
        stats = engine.stats()
        assert stats["num_preemptions"] > 0, "the test must actually preempt"
        assert stats["kv_blocks_free"] == stats["kv_blocks_total"]
        for prompt, out in zip(prompts, outs):
            assert out.outputs[0].token_ids == reference_greedy(references["llama"], prompt, 40)


@pytest.mark.parametrize("rope", [
    {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0},
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 64, "rope_theta": 500000.0},
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128, "rope_theta": 10000.0},
])
def test_rope_scaling_matches_transformers(tmp_path, rope):
    path = save_tiny_model(tmp_path / "m", "llama", seed=3, rope_parameters=rope)
    ref = load_reference(path)
    with Engine(model=str(path), max_num_batched_tokens=9) as engine:
        prompt = engine.tokenizer(PROMPT * 3)["input_ids"]
        assert greedy_ids(engine, prompt) == reference_greedy(ref, prompt, 32)


def test_masked_fallback_path_matches(tiny_dirs, references, monkeypatch):
    """Without torch's CPU flash op (other builds, other devices) chunks use a dense mask."""
    import engine.layers.attention as attention
    monkeypatch.setattr(attention, "_CPU_FLASH", None)
    with Engine(model=str(tiny_dirs["qwen2"]), max_num_batched_tokens=7) as engine:
        prompt = engine.tokenizer(PROMPT)["input_ids"]
        assert greedy_ids(engine, prompt) == reference_greedy(references["qwen2"], prompt, 32)


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_workspace_forward_matches_transformers(tiny_dirs, references, family):
    """The GPU-path forward (preallocated workspace, sliced norms/RoPE/MLP) on the CPU."""
    with Engine(model=str(tiny_dirs[family]), use_workspace=True, workspace_slice_tokens=5,
                max_num_batched_tokens=16) as engine:
        assert engine.stats()["memory"]["workspace_bytes"] > 0
        prompt = engine.tokenizer(PROMPT)["input_ids"]
        assert greedy_ids(engine, prompt) == reference_greedy(references[family], prompt, 32)
