"""Sampler and detokenizer: seeds, top-k/top-p, logprobs, stop conditions, multi-byte text."""
import torch

from engine import Engine, SamplingParams
from engine.detokenizer import IncrementalDetokenizer
from engine.layers.sampler import _filter_top_k_top_p, sample

from .tiny_models import build_tokenizer


def test_top_k_and_top_p_filters():
    logits = torch.tensor([3.0, 2.0, 1.0, 0.0])
    assert torch.isinf(_filter_top_k_top_p(logits, 2, 1.0)[2:]).all()
    probs = logits.softmax(-1)              # ~[0.64, 0.24, 0.09, 0.03]
    kept = ~torch.isinf(_filter_top_k_top_p(logits, -1, 0.7))
    assert kept.tolist() == [True, True, False, False]
    assert probs[0] < 0.7 <= probs[:2].sum()


def test_seeded_sampling_is_reproducible_and_top_k_1_is_greedy(llama_dir):
    with Engine(model=str(llama_dir)) as engine:
        prompt = "Paris is the capital of"
        a = engine.generate([prompt], SamplingParams(temperature=1.0, seed=7, max_tokens=16, ignore_eos=True))[0]
        b = engine.generate([prompt], SamplingParams(temperature=1.0, seed=7, max_tokens=16, ignore_eos=True))[0]
        c = engine.generate([prompt], SamplingParams(temperature=1.0, seed=8, max_tokens=16, ignore_eos=True))[0]
        assert a.outputs[0].token_ids == b.outputs[0].token_ids != c.outputs[0].token_ids
        greedy = engine.generate([prompt], SamplingParams(temperature=0, max_tokens=16, ignore_eos=True))[0]
        top1 = engine.generate([prompt], SamplingParams(temperature=0.8, top_k=1, seed=3, max_tokens=16,
                                                        ignore_eos=True))[0]
        assert greedy.outputs[0].token_ids == top1.outputs[0].token_ids


def test_logprobs_include_sampled_token_and_top_k():
    logits = torch.tensor([[0.0, 2.0, 1.0, -1.0]])
    tokens, lps = sample(logits, [SamplingParams(temperature=0, logprobs=2)], [None])
    assert tokens == [1]
    lp = lps[0]
    assert set(lp) == {1, 2} and lp[1].rank == 1 and lp[2].rank == 2
    assert abs(lp[1].logprob - float(logits[0].log_softmax(-1)[1])) < 1e-6


def test_stop_strings_and_stop_token_ids(llama_dir):
    with Engine(model=str(llama_dir)) as engine:
        params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
        free = engine.generate(["The quick"], params)[0].outputs[0]
        assert len(free.text) > 4
        stop = free.text[2:4]
        cut = engine.generate(["The quick"], SamplingParams(temperature=0, max_tokens=24, ignore_eos=True,
                                                            stop=[stop]))[0].outputs[0]
        assert cut.finish_reason == "stop" and cut.stop_reason == stop
        assert cut.text == free.text[:free.text.find(stop)]
        token = free.token_ids[3]
        by_id = engine.generate(["The quick"], SamplingParams(temperature=0, max_tokens=24, ignore_eos=True,
                                                              stop_token_ids=[token]))[0].outputs[0]
        assert by_id.finish_reason == "stop" and by_id.token_ids[-1] == token
        assert by_id.token_ids == free.token_ids[:free.token_ids.index(token) + 1]


def test_streamed_text_never_splits_a_multibyte_character():
    tok = build_tokenizer()
    text = "Ünïcödé tëxt, 中文字符, emoji 🙂!"
    ids = [i for t in text for i in tok(t, add_special_tokens=False)["input_ids"]]  # byte-ish pieces
    detok = IncrementalDetokenizer(tok)
    pieces = []
    for i in ids:
        before = detok.text
        detok.add(i)
        assert "\ufffd" not in detok.text
        pieces.append(detok.text[len(before):])
    assert "".join(pieces) == tok.decode(ids) == text
    assert "" in pieces          # some token ended mid-character and was held back


def test_stop_string_prefix_is_held_back_while_streaming():
    tok = build_tokenizer()
    detok = IncrementalDetokenizer(tok, stop=["STOP"])
    for i in tok("hello ST", add_special_tokens=False)["input_ids"]:
        detok.add(i)
    assert detok.stable_text(finished=False) == "hello "
    assert detok.stable_text(finished=True) == "hello ST"


def test_engine_seed_makes_unseeded_sampling_reproducible(llama_dir):
    params = SamplingParams(temperature=1.0, max_tokens=16, ignore_eos=True)
    runs = []
    for seed in (5, 5, 6):
        with Engine(model=str(llama_dir), seed=seed) as engine:
            runs.append(engine.generate(["Paris is the capital of"], params)[0].outputs[0].token_ids)
    assert runs[0] == runs[1] != runs[2]


def test_device_sampling_follows_temperature_top_k_and_top_p():
    """The sampler used for steps launched ahead (no host sync): greedy rows take the argmax,
    others draw from softmax(logits / T) restricted by top-k / top-p."""
    from engine.layers.sampler import sample_on_device
    logits = torch.tensor([3.0, 2.0, 1.0, 0.0])
    gen = torch.Generator().manual_seed(0)
    rows = logits.repeat(4, 1)
    params = [SamplingParams(temperature=0), SamplingParams(temperature=2.0),
              SamplingParams(temperature=1.0, top_k=2), SamplingParams(temperature=1.0, top_p=0.7)]
    draws = torch.stack([sample_on_device(rows, params, gen) for _ in range(4000)])
    assert (draws[:, 0] == 0).all()
    freq = torch.bincount(draws[:, 1], minlength=4).float() / len(draws)
    assert (freq - (logits / 2.0).softmax(-1)).abs().max() < 0.03
    assert set(draws[:, 2].tolist()) == {0, 1} and set(draws[:, 3].tolist()) == {0, 1}
    top2 = logits[:2].softmax(-1)[0]
    assert abs((draws[:, 2] == 0).float().mean() - top2) < 0.03


def test_unseeded_sampling_runs_ahead_and_seeded_requests_keep_their_draws(llama_dir):
    """Unseeded sampled requests take the overlapped path (one request: reproducible with
    the engine's seed; a batch's draws depend on how requests happen to share steps); a
    request with its own seed samples on the host, its draws independent of batching."""
    prompts = ["Paris is the capital of", "def main():", "Berlin is", "The lazy dog"]
    unseeded = SamplingParams(temperature=0.9, top_p=0.95, max_tokens=12, ignore_eos=True)
    seeded = SamplingParams(temperature=0.9, seed=11, max_tokens=12, ignore_eos=True)
    runs = []
    for _ in range(2):
        with Engine(model=str(llama_dir), seed=4) as engine:
            runs.append(engine.generate([prompts[0]], unseeded)[0].outputs[0].token_ids)
            assert engine.stats()["num_steps_ahead"] > 0
            mixed = engine.generate(prompts[1:] + [prompts[0]], [unseeded] * 3 + [seeded])
            assert all(len(o.outputs[0].token_ids) == 12 for o in mixed)
            alone = engine.generate([prompts[0]], seeded)[0]
            assert mixed[-1].outputs[0].token_ids == alone.outputs[0].token_ids
    assert runs[0] == runs[1] and len(runs[0]) == 12
