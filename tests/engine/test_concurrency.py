"""Requests from many threads are batched by one engine loop and give serial answers."""
import threading

from engine import Engine, SamplingParams

from .tiny_models import CORPUS


def test_sixteen_threads_match_serial(llama_dir):
    params = SamplingParams(max_tokens=12, temperature=0, ignore_eos=True)
    prompts = [CORPUS[i % 6] * (1 + i % 3) + f" #{i}" for i in range(16)]
    with Engine(model=str(llama_dir), max_num_batched_tokens=64) as engine:
        serial = [engine.generate([p], params)[0].outputs[0].token_ids for p in prompts]
        results = [None] * 16
        barrier = threading.Barrier(16)

        def worker(i):
            barrier.wait()
            tokens = None
            for out in engine.stream(prompts[i], params):
                tokens = out.outputs[0].token_ids
            results[i] = tokens

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
        steps_before = engine.num_steps
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert results == serial
        # Batched: far fewer steps than 16 requests run one after another would take.
        assert engine.num_steps - steps_before < 16 * 12
        stats = engine.stats()
        assert stats["kv_blocks_free"] == stats["kv_blocks_total"]
