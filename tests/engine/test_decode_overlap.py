"""Decode overlap (engine/overlap.py): launching the next decode step before the
current step's tokens reach the host changes nothing a caller sees."""
import threading

from engine import Engine, SamplingParams

from .test_parity import PROMPT
from .tiny_models import CORPUS, reference_greedy

PROMPTS = [PROMPT, CORPUS[1], CORPUS[2] * 2, "Berlin is the capital of", CORPUS[4], CORPUS[5] + " ok"]


def run(llama_dir, params_for, overlap, **engine_args):
    with Engine(model=str(llama_dir), overlap_decode=overlap, **engine_args) as engine:
        outs = engine.generate(PROMPTS, [params_for(i) for i in range(len(PROMPTS))])
        stats = engine.stats()
    assert stats["kv_blocks_free"] == stats["kv_blocks_total"], "a KV block leaked"
    return [(o.outputs[0].token_ids, o.outputs[0].text, o.outputs[0].finish_reason, o.outputs[0].stop_reason)
            for o in outs], stats


def test_stops_mid_batch_match_steps_in_turn(llama_dir):
    """Requests that end at different steps, by length, by a stop token or by a stop string
    (so the step after their last token is already in flight): same tokens, text, reasons."""
    plain = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    free_run, _ = run(llama_dir, lambda i: plain, overlap=False)
    stop_token = free_run[0][0][6]                 # request 0 ends at its 7th token
    stop_text = free_run[3][1][4:9]                # request 3 ends on a piece of its own text

    def params_for(i):
        return SamplingParams(max_tokens=[24, 5, 17, 24, 1, 30][i], temperature=0.0, ignore_eos=True,
                              stop_token_ids=[stop_token] if i == 0 else [],
                              stop=[stop_text] if i == 3 and stop_text.strip() else [])
    in_turn, stats_off = run(llama_dir, params_for, overlap=False)
    ahead, stats_on = run(llama_dir, params_for, overlap=True)
    assert stats_off["num_steps_ahead"] == 0
    assert stats_on["num_steps_ahead"] > 10, "the overlap path must actually run"
    assert ahead == in_turn
    assert in_turn[0][2:] == ("stop", stop_token) and len(in_turn[0][0]) <= 7
    assert [len(t) for t, *_ in in_turn][1::3] == [5, 1]


def test_matches_transformers_with_preemption(llama_dir, references):
    """A pool too small for everyone: steps launched ahead must give way to the scheduler,
    which preempts; answers still match transformers and no block leaks."""
    per_token = 2 * 2 * 2 * 16 * 4
    params = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)
    with Engine(model=str(llama_dir), block_size=4, kv_cache_memory=per_token * 4 * 30,
                max_num_batched_tokens=64) as engine:
        prompts = [engine.tokenizer(p)["input_ids"] for p in PROMPTS[:4]]
        outs = engine.generate(prompts, params)
        stats = engine.stats()
    assert stats["num_preemptions"] > 0 and stats["num_steps_ahead"] > 0
    assert stats["kv_blocks_free"] == stats["kv_blocks_total"]
    for prompt, out in zip(prompts, outs):
        assert out.outputs[0].token_ids == reference_greedy(references["llama"], prompt, 40)


def test_arrivals_and_aborts_while_a_step_is_in_flight(llama_dir):
    """A request arriving mid-decode gets scheduled (with a prefill) and answers as it would
    alone; an aborted one frees its blocks; the others are untouched."""
    params = SamplingParams(max_tokens=30, temperature=0.0, ignore_eos=True)
    with Engine(model=str(llama_dir), overlap_decode=False) as engine:
        alone = [engine.generate([p], params)[0].outputs[0].token_ids for p in PROMPTS]
    with Engine(model=str(llama_dir)) as engine:
        ids = [engine.submit(p, params) for p in PROMPTS[:4]]
        results = {}

        def consume(i, rid):
            tokens = []
            for n, out in enumerate(engine.outputs(rid)):
                tokens = out.outputs[0].token_ids
                if i == 0 and n == 3:
                    late.append(engine.submit(PROMPTS[4], params))
                if i == 1 and len(tokens) >= 8:
                    engine.abort(rid)
            results[i] = (tokens, out.outputs[0].finish_reason)
        late = []
        threads = [threading.Thread(target=consume, args=(i, rid)) for i, rid in enumerate(ids)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        late_tokens = [o for o in engine.outputs(late[0])][-1].outputs[0].token_ids
        stats = engine.stats()
    assert stats["num_steps_ahead"] > 0
    assert stats["kv_blocks_free"] == stats["kv_blocks_total"]
    assert late_tokens == alone[4]
    assert results[1][1] == "abort" and results[1][0] == alone[1][:len(results[1][0])]
    for i in (0, 2, 3):
        assert results[i] == (alone[i], "length")
