"""GPU backend vs transformers and vs our CPU reference — runs only where CUDA exists."""
import time

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU here: the GPU backend is checked on the device machine "
                "(bash bench/run_gpu.sh); its logic is checked on the CPU by "
                "test_gpu_backend_logic.py", allow_module_level=True)

from engine import Engine, SamplingParams  # noqa: E402

from .tiny_models import SMALL_GPU_ENGINE, check_answers_and_prefix_hit  # noqa: E402

PROMPT = "The quick brown fox jumps over the lazy dog. Paris is the capital of"


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3"])
@pytest.mark.parametrize("graphs", [False, True])
def test_gpu_float32_greedy_matches_transformers(tiny_dirs, references, family, graphs):
    params = SamplingParams(max_tokens=24, temperature=0, ignore_eos=True)
    with Engine(model=str(tiny_dirs[family]), cuda_graphs=graphs, **SMALL_GPU_ENGINE) as engine:
        assert engine.runner.attention.name == "cuda"
        assert (engine.runner.graphs is not None) == graphs
        texts = [PROMPT, "def main():\n    print('hello')", "Berlin is"]
        prompts = [engine.tokenizer(t)["input_ids"] for t in texts]
        stats = check_answers_and_prefix_hit(engine, references[family], prompts, params, 5)
        assert stats["num_steps_ahead"] > 0, "decode overlap is on by default and must have run"


@pytest.mark.parametrize("graphs", [False, True])
def test_gpu_decode_overlap_matches_steps_in_turn(llama_dir, graphs):
    """Steps launched before the previous tokens reached the host (token ids read on the
    device, pinned staging of the graph inputs): the same tokens, stops and reasons."""
    prompts = [PROMPT, "def main():", "Berlin is", "a b c d e f", "x" * 30, "The lazy dog"]
    results = {}
    for overlap in (False, True):
        with Engine(model=str(llama_dir), device="cuda", dtype="float32", block_size=4, cuda_graphs=graphs,
                    overlap_decode=overlap, max_num_seqs=8) as engine:
            free = engine.generate([prompts[0]], SamplingParams(max_tokens=12, temperature=0, ignore_eos=True))
            stop = free[0].outputs[0].token_ids[5]
            params = [SamplingParams(max_tokens=[30, 3, 17, 30, 1, 25][i], temperature=0, ignore_eos=True,
                                     stop_token_ids=[stop] if i == 0 else []) for i in range(6)]
            outs = engine.generate(prompts, params)
            results[overlap] = [(o.outputs[0].token_ids, o.outputs[0].finish_reason) for o in outs]
            stats = engine.stats()
            assert stats["kv_blocks_free"] == stats["kv_blocks_total"]
            assert (stats["num_steps_ahead"] > 0) == overlap
    assert results[True] == results[False]
    assert results[True][0][1] == "stop"


def test_gpu_sampled_requests_draw_on_the_device_and_run_ahead(llama_dir):
    """Unseeded temperature / top-k / top-p rows are drawn on the GPU (a CUDA generator), so
    their steps launch ahead: top_k=1 gives the greedy answer, the same engine seed the same
    draws, and the draws follow softmax(logits / T) within top-p."""
    from engine.layers.sampler import sample_on_device
    logits = torch.tensor([3.0, 2.0, 1.0, 0.0], device="cuda").repeat(2, 1)
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = [SamplingParams(temperature=2.0), SamplingParams(temperature=1.0, top_p=0.7)]
    draws = torch.stack([sample_on_device(logits, rows, gen) for _ in range(4000)]).cpu()
    freq = torch.bincount(draws[:, 0], minlength=4).float() / len(draws)
    assert (freq - (logits[0].cpu() / 2.0).softmax(-1)).abs().max() < 0.03
    assert set(draws[:, 1].tolist()) == {0, 1}

    prompts = [PROMPT, "def main():", "Berlin is"]
    greedy = SamplingParams(max_tokens=16, temperature=0, ignore_eos=True)
    top1 = SamplingParams(max_tokens=16, temperature=0.8, top_k=1, ignore_eos=True)
    warm = SamplingParams(max_tokens=16, temperature=0.9, top_p=0.95, ignore_eos=True)
    runs = []
    for _ in range(2):
        with Engine(model=str(llama_dir), device="cuda", dtype="float32", seed=3) as engine:
            expected = [o.outputs[0].token_ids for o in engine.generate(prompts, greedy)]
            ahead = engine.stats()["num_steps_ahead"]
            assert [o.outputs[0].token_ids for o in engine.generate(prompts, top1)] == expected
            assert engine.stats()["num_steps_ahead"] > ahead, "sampled rows must take the overlapped path"
            runs.append(engine.generate([prompts[0]], warm)[0].outputs[0].token_ids)
    assert runs[0] == runs[1] and len(runs[0]) == 16


def test_gpu_bf16_logits_close_to_reference_backend(tmp_path):
    """bf16 on the GPU: the fast backend agrees with the exact torch backend on one device."""
    from .tiny_models import save_tiny_model
    path = save_tiny_model(tmp_path / "m", "qwen2", seed=11, hidden_size=256, intermediate_size=512,
                           num_attention_heads=8, num_key_value_heads=2, num_hidden_layers=3,
                           max_position_embeddings=4096)
    prompt = list(range(5, 300)) * 6
    logprobs = {}
    for backend in ("torch", "cuda"):
        with Engine(model=str(path), device="cuda", dtype="bfloat16", attention_backend=backend,
                    use_workspace=backend == "cuda", max_num_batched_tokens=512) as engine:
            vocab = engine.hf_config.vocab_size
            out = engine.generate([prompt], SamplingParams(max_tokens=3, temperature=0, logprobs=vocab,
                                                           ignore_eos=True))[0]
            logprobs[backend] = torch.tensor([[lp[t].logprob for t in range(vocab)]
                                              for lp in out.outputs[0].logprobs])
    rel = (logprobs["cuda"] - logprobs["torch"]).norm() / logprobs["torch"].norm()
    assert rel < 2e-2, rel


def test_decode_steps_allocate_nothing_new():
    """Steady-state decode makes no new device allocations (CUDA graphs + workspace)."""
    import tempfile
    from pathlib import Path
    from .tiny_models import save_tiny_model
    path = save_tiny_model(Path(tempfile.mkdtemp()) / "m", "llama", seed=2)
    with Engine(model=str(path), device="cuda", dtype="bfloat16", max_num_seqs=4) as engine:
        params = SamplingParams(max_tokens=64, temperature=0, ignore_eos=True)
        engine.generate([list(range(5, 40))] * 2, params)            # warm every code path
        torch.cuda.synchronize()
        before = torch.cuda.memory_stats()["segment.all.allocated"]
        engine.generate([list(range(7, 42)), list(range(9, 44))], params)
        torch.cuda.synchronize()
        assert torch.cuda.memory_stats()["segment.all.allocated"] == before


def test_step_log_records_each_steps_gpu_span(llama_dir):
    """The step log's GPU span (CUDA events) for prefill steps that sample nothing (applied
    without waiting for the device), a completing step and decodes: present and plausible."""
    with Engine(model=str(llama_dir), device="cuda", dtype="bfloat16", max_num_batched_tokens=64) as engine:
        engine.generate([list(range(5, 305))], SamplingParams(max_tokens=6, temperature=0, ignore_eos=True))
        steps = engine.recent_steps()[-10:]
    assert [len(st["prefill"]) for st in steps] == [1] * 5 + [0] * 5     # 300 tokens in chunks of 64
    assert all(st["gpu_s"] is not None and 0 < st["gpu_s"] < 5 for st in steps), steps


def _compiled_variants():
    from engine.layers import triton_decode, triton_merge
    kernels = [triton_decode._paged_decode_kernel, triton_decode._reduce_splits_kernel,
               triton_merge._merge_kernel]
    caches = [getattr(k, "device_caches", None) for k in kernels]
    if any(c is None for c in caches):
        pytest.skip("this Triton keeps no inspectable kernel cache")

    def count(cache):
        return sum(len(v[0]) if isinstance(v, tuple) else len(v) for v in cache.values())
    return [count(c) for c in caches]


def test_mixed_steps_compile_no_new_kernels(llama_dir):
    """A prompt arriving while N users decode runs eager mixed steps with N decodes: whatever N
    is, no Triton kernel is compiled then (a compile is a ~1 s pause every reader would see)."""
    params = SamplingParams(max_tokens=40, temperature=0, ignore_eos=True)
    long_prompt = list(range(5, 305))
    with Engine(model=str(llama_dir), device="cuda", dtype="bfloat16", max_num_batched_tokens=64,
                max_num_seqs=16) as engine:
        def mixed(users, seed):
            ids = [engine.submit(list(range(seed + i, seed + i + 20)), params) for i in range(users)]
            while engine.stats()["num_running"] < users:
                time.sleep(0.001)
            ids.append(engine.submit(long_prompt[:-seed % 7 - 1], SamplingParams(max_tokens=2, temperature=0)))
            for rid in ids:
                for _ in engine.outputs(rid):
                    pass
        mixed(7, 11)
        before = _compiled_variants()
        for users, seed in ((3, 40), (5, 60), (6, 80), (1, 100)):
            mixed(users, seed)
        assert _compiled_variants() == before
        steps = engine.recent_steps()
        assert any(s["decodes"] and s["prefill"] for s in steps), "the test must run mixed steps"
