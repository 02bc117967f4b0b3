"""Scheduling invariants: the token budget, decodes first, aborts and admission errors."""
import time

import pytest

from engine import Engine, PromptTooLongError, RequestRejected, SamplingParams


def record_steps(engine):
    """Wrap the scheduler to record every step's scheduled chunks."""
    steps = []
    original = engine.scheduler.schedule

    def schedule():
        out = original()
        steps.append([(c.request.request_id, c.start, c.num_tokens) for c in out.chunks])
        return out

    engine.scheduler.schedule = schedule
    return steps


def test_scheduled_tokens_never_exceed_budget(llama_dir):
    with Engine(model=str(llama_dir), max_num_batched_tokens=13) as engine:
        steps = record_steps(engine)
        prompts = [list(range(3, 3 + n)) for n in (40, 7, 25, 60, 1)]
        outs = engine.generate(prompts, SamplingParams(max_tokens=6, temperature=0, ignore_eos=True))
        assert all(len(o.outputs[0].token_ids) == 6 for o in outs)
        assert steps and max(sum(n for _, _, n in s) for s in steps) <= 13
        assert any(sum(n for _, _, n in s) == 13 for s in steps)    # the budget is used


def test_decodes_are_scheduled_before_a_long_prefill(llama_dir):
    with Engine(model=str(llama_dir), max_num_batched_tokens=16) as engine:
        steps = record_steps(engine)
        short = engine.submit(list(range(3, 10)), SamplingParams(max_tokens=30, temperature=0, ignore_eos=True))
        outs = engine.outputs(short)
        next(outs)                                 # the short request is now decoding
        long = engine.generate([[3 + i % 300 for i in range(400)]], SamplingParams(max_tokens=1, temperature=0))[0]
        assert long.outputs[0].finish_reason == "length"
        for _ in outs:
            pass
        mixed = [s for s in steps if len(s) == 2]
        assert mixed, "the long prefill must run alongside the decode"
        for s in mixed:
            assert s[0][0] == short and s[0][2] == 1          # the decode comes first, whole
            assert s[0][2] + s[1][2] <= 16


def test_abort_mid_prefill_returns_all_blocks(llama_dir):
    with Engine(model=str(llama_dir), max_num_batched_tokens=8) as engine:
        rid = engine.submit(list(range(3, 300)), SamplingParams(max_tokens=5, temperature=0))
        last = None
        for out in engine.outputs(rid):
            last = out
            if 0 < out.progress < 0.5:
                engine.abort(rid)
        assert last.finished and last.outputs[0].finish_reason == "abort"
        assert 0 < last.metrics.num_computed_prompt_tokens < 297
        deadline = time.time() + 5
        while engine.stats()["kv_blocks_free"] != engine.stats()["kv_blocks_total"]:
            assert time.time() < deadline
            time.sleep(0.01)


def test_consumer_stopping_early_aborts(llama_dir):
    with Engine(model=str(llama_dir), max_num_batched_tokens=8) as engine:
        gen = engine.stream(list(range(3, 200)), SamplingParams(max_tokens=50, temperature=0, ignore_eos=True))
        next(gen)
        gen.close()                               # e.g. the UI's Stop button
        deadline = time.time() + 5
        while engine.stats()["num_running"] or engine.stats()["num_waiting"]:
            assert time.time() < deadline
            time.sleep(0.01)
        assert engine.stats()["kv_blocks_free"] == engine.stats()["kv_blocks_total"]


def test_prompt_longer_than_max_model_len_is_rejected_with_numbers(llama_dir):
    with Engine(model=str(llama_dir), max_model_len=64) as engine:
        with pytest.raises(PromptTooLongError) as err:
            engine.submit(list(range(3, 103)), SamplingParams())
        assert "100 tokens" in str(err.value) and "64" in str(err.value)
        with pytest.raises(RequestRejected):
            engine.submit([], SamplingParams())
        with pytest.raises(RequestRejected, match="token ids must be in"):
            engine.submit([1, 2, 10**6], SamplingParams())
        assert engine.stats()["num_waiting"] == 0


def test_prompt_that_can_never_fit_the_pool_is_rejected(llama_dir):
    per_token = 2 * 2 * 2 * 16 * 4
    with Engine(model=str(llama_dir), block_size=4, kv_cache_memory=per_token * 4 * 5) as engine:
        with pytest.raises(PromptTooLongError) as err:
            engine.submit(list(range(3, 40)), SamplingParams())
        assert "kv_cache_memory" in str(err.value)
        ok = engine.generate([list(range(3, 12))], SamplingParams(max_tokens=3, temperature=0))[0]
        assert len(ok.outputs[0].token_ids) == 3


def test_generation_stops_at_max_model_len(llama_dir):
    with Engine(model=str(llama_dir), max_model_len=40) as engine:
        out = engine.generate([list(range(3, 33))], SamplingParams(max_tokens=100, temperature=0, ignore_eos=True))[0]
        assert out.outputs[0].finish_reason == "length"
        assert len(out.prompt_token_ids) + len(out.outputs[0].token_ids) == 40


def test_metrics_are_filled(llama_dir):
    with Engine(model=str(llama_dir)) as engine:
        out = engine.generate(["Paris is the capital of"], SamplingParams(max_tokens=8, temperature=0, ignore_eos=True))[0]
        m = out.metrics
        assert m.arrival_time <= m.first_scheduled_time <= m.first_token_time <= m.finished_time
        assert m.ttft > 0 and m.num_generated_tokens == 8 and m.decode_tokens_per_s > 0
        assert m.num_prompt_tokens == len(out.prompt_token_ids) and out.progress == 1.0


def _decoding_requests(scheduler, count, prompt_len=10):
    """Requests that finished their prompts and are one token behind (they decode next)."""
    from engine.request import Request
    requests = [Request(f"d{i}", [5] * prompt_len, SamplingParams()) for i in range(count)]
    for request in requests:
        scheduler.add(request)
    scheduler.schedule()
    for request in requests:
        request.num_computed_tokens = prompt_len
        request.output_token_ids.append(7)
    return requests


def _run_prefill(scheduler, long, decoding):
    """Schedule until `long` has computed its prompt; each step's [(start, tokens)] of it."""
    steps = []
    while long.num_computed_tokens < long.num_prompt_tokens:
        out = scheduler.schedule()
        chunk = next(c for c in out.chunks if c.request is long)
        steps.append([(c.start, c.num_tokens) for c in out.chunks])
        long.num_computed_tokens = chunk.end
        for request in decoding:
            request.num_computed_tokens = request.num_tokens
            request.output_token_ids.append(7)
    return steps


@pytest.mark.parametrize("readers", [0, 2])
def test_step_time_budget_shrinks_deep_chunks_while_others_decode(readers):
    """With max_step_time, chunks get smaller as the prompt's cached context grows, so that
    every step (decodes included) fits the budget; with nobody decoding the prompt runs in
    full token-budget chunks (no one is waiting for a token)."""
    from engine.kv_cache import KVCacheManager
    from engine.request import Request
    from engine.scheduler import Scheduler
    from engine.step_cost import StepCostModel
    model = StepCostModel(matmul_s_per_token=1e-4, attention_s_per_pair=1e-6, overhead_s=0.0)
    assert model.max_chunk(0, 0.05) > model.max_chunk(400, 0.05) >= 1
    assert abs(model.chunk_cost(0, model.max_chunk(0, 0.05)) - 0.05) < 0.002
    scheduler = Scheduler(KVCacheManager(num_blocks=400, block_size=16), max_num_batched_tokens=256,
                          max_num_seqs=8, cost_model=model, max_step_time=0.05)
    decoding = _decoding_requests(scheduler, readers)
    long = Request("long", [5] * 447, SamplingParams())
    scheduler.add(long)
    steps = _run_prefill(scheduler, long, decoding)
    chunks = [n for s in steps for start, n in s if n > 1]
    if not readers:
        assert chunks == [256, 191]
        return
    assert len(chunks) >= 3 and chunks[0] > chunks[-2]       # deeper chunks are smaller
    assert sum(chunks) == 447
    for s in steps:
        assert len(s) == readers + 1                           # every reader got its token
        assert sum(model.chunk_cost(start, n) for start, n in s) <= 0.05 + 1e-9


def test_prefill_chunks_are_multiples_of_the_granule_except_the_last():
    """The GPU attention's fast kernels take canonical lengths: a chunk that does not end its
    prompt is cut to a multiple of the granule, even when decodes take part of the budget."""
    from engine.kv_cache import KVCacheManager
    from engine.request import Request
    from engine.scheduler import Scheduler
    scheduler = Scheduler(KVCacheManager(num_blocks=400, block_size=16), max_num_batched_tokens=100,
                          max_num_seqs=8, chunk_granule=32)
    decoding = [Request(f"d{i}", [5] * 10, SamplingParams()) for i in range(3)]
    for request in decoding:
        scheduler.add(request)
    scheduler.schedule()
    for request in decoding:
        request.num_computed_tokens = 10
        request.output_token_ids.append(7)            # one token behind: decodes next
    long = Request("long", [5] * 300, SamplingParams())
    scheduler.add(long)
    lengths = []
    while long.num_computed_tokens < 300:
        out = scheduler.schedule()
        chunk = next(c for c in out.chunks if c.request is long)
        assert sum(c.num_tokens for c in out.chunks) <= 100
        lengths.append(chunk.num_tokens)
        long.num_computed_tokens = chunk.end
        for request in decoding:
            request.num_computed_tokens = request.num_tokens
            request.output_token_ids.append(7)
    assert all(n % 32 == 0 for n in lengths[:-1]) and sum(lengths) == 300
    assert lengths[0] == 96                              # 97 tokens left after 3 decodes


def test_a_whole_slice_stays_whole_when_it_is_no_multiple_of_the_granule():
    """The GPU step can be a slice of 8448 tokens (whole waves, engine/step_shape.py) with a
    granule of 1024 for shorter chunks: a full chunk stays one slice, not 8 granules."""
    from engine.kv_cache import KVCacheManager
    from engine.request import Request
    from engine.scheduler import Scheduler
    scheduler = Scheduler(KVCacheManager(num_blocks=2000, block_size=16), max_num_batched_tokens=8448,
                          max_num_seqs=8, chunk_granule=1024, chunk_slice=8448)
    long = Request("long", [5] * 20000, SamplingParams())
    scheduler.add(long)
    lengths = []
    while long.num_computed_tokens < 20000:
        chunk = scheduler.schedule().chunks[0]
        lengths.append(chunk.num_tokens)
        long.num_computed_tokens = chunk.end
    assert lengths == [8448, 8448, 3104]
    assert scheduler._limit(Request("r", [5] * 20000, SamplingParams()), 8440) == 8192   # beside 8 decodes


def test_chunks_shorter_than_the_granule_are_budgeted_at_the_slow_kernels_speed():
    """Deep in a prompt the budget may allow less than one granule: such a chunk misses the
    fast kernel, so it is sized (and charged) at the slow kernel's cost."""
    from engine.kv_cache import KVCacheManager
    from engine.request import Request
    from engine.scheduler import Scheduler
    from engine.step_cost import StepCostModel
    model = StepCostModel(matmul_s_per_token=1e-5, attention_s_per_pair=1e-6, overhead_s=0.0,
                          slow_attention_factor=3.0)
    scheduler = Scheduler(KVCacheManager(num_blocks=400, block_size=16), max_num_batched_tokens=256,
                          max_num_seqs=8, cost_model=model, max_step_time=0.01, chunk_granule=32)
    decoding = _decoding_requests(scheduler, 1)
    long = Request("long", [5] * 800, SamplingParams())
    scheduler.add(long)
    steps = _run_prefill(scheduler, long, decoding)
    small = [(start, n) for s in steps for start, n in s if 1 < n < 32]
    assert small, "the budget must force sub-granule chunks deep in the prompt"
    for s in steps:
        prefill = [(start, n) for start, n in s if n > 1]
        cost = sum(model.chunk_cost(start, n, slow=n < 32) for start, n in prefill) + \
            sum(model.chunk_cost(start, 1) for start, n in s if n == 1)
        assert cost <= 0.01 + 1e-9
    for start, n in small:            # as long as the slow kernel's cost allows, no longer
        assert n == 800 - start or abs(model.chunk_cost(start, n + 1, slow=True) - 0.01) < 0.002


def test_step_time_model_calibrates_to_the_steps_it_measures():
    """On a device twice as slow as modelled, budgeted steps overrun at first; the measured
    step times pull the model's scale to ~2, after which steps fit the budget again. Steps
    without readers (unbudgeted) leave the scale alone."""
    from engine.kv_cache import KVCacheManager
    from engine.request import Request
    from engine.scheduler import Scheduler
    from engine.step_cost import StepCostModel
    truth = StepCostModel(matmul_s_per_token=2e-4, attention_s_per_pair=2e-6, overhead_s=0.001)
    model = StepCostModel(matmul_s_per_token=1e-4, attention_s_per_pair=1e-6, overhead_s=0.001)
    scheduler = Scheduler(KVCacheManager(num_blocks=800, block_size=16), max_num_batched_tokens=256,
                          max_num_seqs=8, cost_model=model, max_step_time=0.05)
    alone = Request("alone", [5] * 300, SamplingParams())
    scheduler.add(alone)
    scheduler.schedule()
    scheduler.observe_step(1.0)                       # no one decoding: not budgeted
    assert model.scale == 1.0
    scheduler.running.remove(alone)
    scheduler.kv.free(alone)
    _decoding_requests(scheduler, 2)
    long = Request("long", [5] * 4000, SamplingParams())
    scheduler.add(long)
    measured = []
    for _ in range(14):
        out = scheduler.schedule()
        seconds = truth.overhead_s + sum(truth.chunk_cost(c.start, c.num_tokens) for c in out.chunks)
        scheduler.observe_step(seconds)
        measured.append(seconds)
        for chunk in out.chunks:
            chunk.request.num_computed_tokens = chunk.end
            if chunk.request is not long:
                chunk.request.output_token_ids.append(7)
    assert measured[0] > 0.08                          # the uncalibrated model overran
    assert abs(model.scale - 2.0) < 0.15, model.scale
    assert all(s <= 0.05 * 1.1 for s in measured[-5:]), measured
