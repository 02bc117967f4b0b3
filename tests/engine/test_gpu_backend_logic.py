"""The GPU attention backend's logic, run on the CPU.

Triton's interpreter (TRITON_INTERPRET=1) executes the paged-decode kernel on CPU tensors and
the prefill path uses its exact "math" kernel, so sub-chunked prefill, cache-run views, GQA
folding, log-sum-exp merges and batched split-K decode are all checked against transformers
here. On a GPU host the real kernels are checked by test_gpu_backend.py instead.
"""
import os
import sys

import pytest
import torch

if torch.cuda.is_available():
    pytest.skip("GPU present: test_gpu_backend.py checks the compiled kernels", allow_module_level=True)
if "engine.layers.triton_decode" not in sys.modules:
    os.environ["TRITON_INTERPRET"] = "1"        # must be set before the kernel module is imported
pytest.importorskip("triton", reason="Triton is not installed (pip install triton)")

from engine import Engine, SamplingParams  # noqa: E402
from engine.layers.gpu_attention import block_runs, runs_between  # noqa: E402

from .tiny_models import check_answers_and_prefix_hit  # noqa: E402

PROMPTS = ["The quick brown fox jumps over the lazy dog. Paris is the capital of",
           "def main():\n    print('hello world')\n    return 0\n",
           "Prefill reads the prompt; decode writes the answer"]


def test_block_runs_merge_consecutive_blocks():
    runs = block_runs([3, 4, 5, 9, 10, 2], 0, 22, 4)
    assert runs == [(12, 0, 12), (36, 12, 8), (8, 20, 2)]
    assert block_runs([3, 4, 5], 6, 10, 4) == [(18, 6, 4)]
    assert block_runs([7], 0, 3, 4) == [(28, 0, 3)]
    assert runs_between(runs, 0, 22) == [(12, 12), (36, 8), (8, 2)]
    assert runs_between(runs, 10, 14) == [(22, 2), (36, 2)]
    assert runs_between(runs, 0, 0) == []


def test_block_runs_match_a_walk_block_by_block():
    """The vectorized run finder against the obvious walk, on random tables and ranges."""
    import random

    def walk(table, begin, end, bs):
        runs, pos = [], begin
        while pos < end:
            slot = table[pos // bs] * bs + pos % bs
            length = min(end, (pos // bs + 1) * bs) - pos
            if runs and runs[-1][0] + runs[-1][2] == slot:
                runs[-1] = (runs[-1][0], runs[-1][1], runs[-1][2] + length)
            else:
                runs.append((slot, pos, length))
            pos += length
        return runs
    rng = random.Random(0)
    for _ in range(2000):
        bs, n = rng.choice([1, 4, 16]), rng.randint(1, 40)
        table = []
        while len(table) < n:
            first = rng.randint(0, 60)
            table += range(first, first + rng.randint(1, 6))
        table = table[:n]
        begin = rng.randint(0, n * bs)
        end = rng.randint(begin, n * bs)
        assert block_runs(table, begin, end, bs) == walk(table, begin, end, bs)


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_cuda_backend_logic_matches_transformers(tiny_dirs, references, family):
    params = SamplingParams(max_tokens=12, temperature=0, ignore_eos=True)
    with Engine(model=str(tiny_dirs[family]), attention_backend="cuda", use_workspace=True,
                workspace_slice_tokens=6, attention_query_slice=6, block_size=4,
                max_num_batched_tokens=16) as engine:
        prompts = [engine.tokenizer(p)["input_ids"] for p in PROMPTS]
        check_answers_and_prefix_hit(engine, references[family], prompts, params, 7)   # batched, chunked


def test_keys_are_cut_into_canonical_pieces():
    """Only canonical shapes reach the plan-building kernel (cuDNN); the rest is a remainder."""
    from engine.layers import gpu_attention
    from engine.layers.gpu_attention import CudaAttention
    attention = CudaAttention(4, 2, 16, 0.25, "cpu", torch.float32, query_slice=4, max_keys=40)
    assert attention.pieces == [4, 8, 12, 16, 20, 24, 28, 32, 36, 40]
    assert attention.split_pieces([(100, 45), (7, 3), (50, 12)]) == [
        (100, 40, True), (140, 4, True), (144, 1, False), (7, 3, False), (50, 12, True)]
    old = gpu_attention.MAX_PIECE
    gpu_attention.MAX_PIECE = 16
    try:
        capped = CudaAttention(4, 2, 16, 0.25, "cpu", torch.float32, query_slice=4, max_keys=40)
    finally:
        gpu_attention.MAX_PIECE = old
    assert capped.split_pieces([(0, 90)]) == [(0, 16, True), (16, 16, True), (32, 16, True), (48, 16, True),
                                              (64, 16, True), (80, 8, True), (88, 2, False)]


def test_merge_kernel_reads_kernel_layouts_and_matches_logaddexp():
    from engine.layers.attention import merge_attention_states
    from engine.layers.triton_merge import Part, merge_parts
    gen = torch.Generator().manual_seed(3)
    L, H, D = 5, 6, 16
    own, own_lse = torch.randn(1, H, L, D, generator=gen), torch.randn(1, H, L, generator=gen)
    other = torch.randn(L, H, D, generator=gen).transpose(0, 1).unsqueeze(0)       # BSHD strides
    other_lse = torch.randn(1, H, L + 4, generator=gen)                           # padded, like flash's
    a, b = Part.of_kernel(own, own_lse), Part.of_kernel(other, other_lse[..., :L])
    expected = merge_attention_states(a.out.transpose(0, 1), a.lse.t(), b.out.transpose(0, 1), b.lse.t())
    out, out_lse = torch.full((L, H, D), float("nan")), torch.full((L, H), float("nan"))
    merge_parts(Part.of_kernel(own, own_lse), Part.of_kernel(other, other_lse)._replace(
        lse=other_lse.reshape(H, -1).t()[:L]), Part(out, out_lse))
    torch.testing.assert_close(out, expected.transpose(0, 1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out_lse, torch.logaddexp(a.lse, b.lse), rtol=1e-5, atol=1e-5)


def _prefill_against_reference(attention, table, start, n, bs, gen, H, kvh, D):
    """One chunk of n queries after `start` cached positions, through `attention` and the
    exact torch backend over the same paged cache: both outputs."""
    from engine.layers.attention import AttentionMetadata, TorchAttention
    reference = TorchAttention(H, kvh, D, D ** -0.5)
    k_cache, v_cache = torch.randn(400, kvh, D, generator=gen), torch.randn(400, kvh, D, generator=gen)
    q, k, v = (torch.randn(n, h, D, generator=gen) for h in (H, kvh, kvh))
    slots = torch.tensor([table[p // bs] * bs + p % bs for p in range(start, start + n)])
    outs = []
    for backend in (attention, reference):
        caches = (k_cache.clone(), v_cache.clone())
        meta = AttentionMetadata([0], [n], [start], slots, [table], bs)
        backend.prepare(meta, "cpu")
        outs.append(backend.forward(q, k, v, caches, meta))
    return outs


@pytest.mark.parametrize("layout", ["runs", "scattered"])
def test_prefill_slices_over_fragmented_pieces_match_reference(layout):
    """The prefix is cut into canonical pieces by position wherever the runs of blocks
    break: pieces spanning runs are gathered (slots built on the device); parts merge exactly."""
    from engine.layers.gpu_attention import CudaAttention
    gen = torch.Generator().manual_seed(5)
    H, kvh, D, bs = 6, 2, 16, 4
    cuda_like = CudaAttention(H, kvh, D, D ** -0.5, "cpu", torch.float32, query_slice=4, max_keys=16)
    if layout == "runs":     # 45 cached positions in runs of 7, 2 and 3 blocks, then a 7-token chunk
        table = [10, 11, 12, 13, 14, 15, 16, 30, 31, 3, 4, 5, 40, 41]
    else:                    # one-block runs, released tail first
        table = list(range(45, 3, -3))
    start, n = 45, 7
    pieces = cuda_like.key_pieces(runs_between(block_runs(table, 0, start, bs), 0, start))
    lengths = [sum(k for _, k in piece_runs) for piece_runs, _ in pieces]
    assert lengths == [16, 16, 12, 1] and [c for _, c in pieces] == [True, True, True, False]
    assert max(len(piece_runs) for piece_runs, _ in pieces) > 1                 # some are gathered
    outs = _prefill_against_reference(cuda_like, table, start, n, bs, gen, H, kvh, D)
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-4, atol=1e-4)


def test_short_query_slices_run_key_pieces_as_batched_parts(monkeypatch):
    """A short canonical query slice runs each long key piece as B batched parts (more
    thread blocks on the GPU), merged like any other parts: exact against the reference."""
    from engine.layers import gpu_attention
    from engine.layers.gpu_attention import CudaAttention
    monkeypatch.setattr(gpu_attention, "MIN_QUERY", 4)
    gen = torch.Generator().manual_seed(8)
    H, kvh, D, bs = 6, 2, 16, 4
    attention = CudaAttention(H, kvh, D, D ** -0.5, "cpu", torch.float32, query_slice=32, max_keys=200)
    assert attention.query_lengths == [32, 16, 8, 4] and attention.key_splits == {8: 2, 4: 4}
    calls = []
    kernel = attention.canonical_kernel
    attention.canonical_kernel = lambda q, k, v, causal, scale: (calls.append((q.shape[0], k.shape[2])),
                                                                 kernel(q, k, v, causal, scale))[1]
    table = list(range(60, 0, -1))                    # one-block runs: pieces are gathered too
    start, n = 70, 12                                 # slices of 8 (B=2) and 4 (B=4) queries
    outs = _prefill_against_reference(attention, table, start, n, bs, gen, H, kvh, D)
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-4, atol=1e-4)
    assert (2, 32) in calls and (4, 16) in calls      # 64 cached keys as 2 x 32 and 4 x 16


def test_key_remainders_are_cut_into_shorter_canonical_pieces(monkeypatch):
    """Keys past the last multiple of the slice go to cuDNN in the halvings of the slice
    (each at most once), and only what is shorter than the granule goes elsewhere."""
    from engine.layers import gpu_attention
    from engine.layers.gpu_attention import CudaAttention
    monkeypatch.setattr(gpu_attention, "MIN_QUERY", 4)
    attention = CudaAttention(4, 2, 16, 0.25, "cpu", torch.float32, query_slice=16, max_keys=64)
    assert attention.query_lengths == [16, 8, 4] and attention.short_pieces == [8, 4]
    assert attention.split_pieces([(0, 45), (100, 7), (200, 3)]) == [
        (0, 32, True), (32, 8, True), (40, 4, True), (44, 1, False), (100, 4, True), (104, 3, False),
        (200, 3, False)]


def test_canonical_query_lengths_are_halvings_of_the_slice():
    from engine.layers.gpu_attention import CudaAttention
    attention = CudaAttention(4, 2, 16, 0.25, "cpu", torch.float32, query_slice=8192, max_keys=100000)
    assert attention.query_lengths == [8192, 4096, 2048, 1024]
    assert attention.chunk_granule == 1024
    assert attention.pieces == [8192, 16384, 24576, 32768]


def test_wave_sized_step_fills_whole_waves_of_the_attention_kernel():
    """28 heads on an H200's 132 SMs: 8448 queries = 66 x 28 = 1848 blocks = 14 full waves
    (8192 would leave the last of 13.6 waves 58% full); the short slices stay 4096/2048/1024
    (a fine granule for time-budgeted chunks), and four slices make the longest key piece."""
    from engine.layers.gpu_attention import CudaAttention
    from engine.step_shape import MAX_TOKENS, TARGET_TOKENS, TILE_ROWS, wave_sized_tokens
    assert wave_sized_tokens(28, 132) == 8448
    assert wave_sized_tokens(32, 128) == 8192                 # 64 x 32 = 2048 blocks = 16 waves already
    for heads in range(1, 65):
        for sms in (78, 108, 114, 132, 144):
            step = wave_sized_tokens(heads, sms)
            assert step % TILE_ROWS == 0 and TARGET_TOKENS <= step <= MAX_TOKENS
    attention = CudaAttention(28, 4, 16, 0.25, "cpu", torch.float32, query_slice=8448, max_keys=300000)
    assert attention.query_lengths == [8448, 4096, 2048, 1024] and attention.chunk_granule == 1024
    assert attention.pieces == [8448, 16896, 25344, 33792]
    assert attention.key_splits == {2048: 2, 1024: 4}
    # chunks beside decodes start anywhere on the granule: their key remainders (below a
    # slice) are cut into canonical pieces, repeated where needed, down to the granule
    for prefix in range(1024, 3 * 8448, 1024):
        pieces = attention.split_pieces([(0, prefix)])
        assert sum(n for _, n, _ in pieces) == prefix
        assert all(canonical for _, n, canonical in pieces if n >= 1024)
    assert attention.split_pieces([(0, 8192)]) == [(0, 4096, True), (4096, 4096, True)]


def test_engine_sizes_its_gpu_step_from_the_device(monkeypatch):
    """The step budget, workspace slice and attention slice default to the wave-sized step
    on a GPU; explicit settings win; the CPU defaults stay as they were."""
    import types
    from engine.config import EngineConfig
    from engine.model_setup import default_step_tokens
    model = types.SimpleNamespace(dims=(28, 4, 128))
    cpu = EngineConfig()
    assert default_step_tokens(cpu, model, torch.device("cpu")) == 8192
    assert (cpu.max_num_batched_tokens, cpu.workspace_slice_tokens) == (2048, 2048)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: types.SimpleNamespace(
        multi_processor_count=132))
    gpu = EngineConfig()
    assert default_step_tokens(gpu, model, torch.device("cuda")) == 8448
    assert (gpu.max_num_batched_tokens, gpu.workspace_slice_tokens) == (8448, 8448)
    set_by_hand = EngineConfig(max_num_batched_tokens=4096)
    default_step_tokens(set_by_hand, model, torch.device("cuda"))
    assert (set_by_hand.max_num_batched_tokens, set_by_hand.workspace_slice_tokens) == (4096, 4096)


def test_merge_warm_up_runs_every_layout_and_leaves_the_cache_alone():
    """Start-up compiles the merge for slices of 1, 17, 48 and a canonical length against a
    canonical piece plus a remainder (so no request pays a first compile), writing nothing
    but scratch."""
    from engine.layers import gpu_attention
    from engine.layers.gpu_attention import CudaAttention
    attention = CudaAttention(6, 2, 16, 0.25, "cpu", torch.float32, query_slice=8, max_keys=64)
    cache = (torch.randn(100, 2, 16), torch.randn(100, 2, 16))
    before = [c.clone() for c in cache]
    calls = []
    original = gpu_attention.merge_parts
    gpu_attention.merge_parts = lambda a, b, out, write_lse=True: (calls.append(out.out.shape[0]),
                                                                   original(a, b, out, write_lse))
    try:
        attention._warm_merges(cache, torch.randn(64, (6 + 4) * 16))
    finally:
        gpu_attention.merge_parts = original
    assert sorted(set(calls)) == [1, 8, 17, 48]
    assert attention._gather_slots, "the two-run layout must have read keys through the gather buffer"
    assert all(torch.equal(a, b) for a, b in zip(cache, before))


def test_merge_warm_up_compiles_the_middle_merge_for_every_row_count(monkeypatch):
    """A slice with three or more key parts merges into the fp32 accumulator and out of it
    again (a compile of its own): the warm-up gives every slice length three parts."""
    from engine.layers import gpu_attention
    from engine.layers.gpu_attention import CudaAttention
    monkeypatch.setattr(gpu_attention, "MIN_QUERY", 4)
    attention = CudaAttention(6, 2, 16, 0.25, "cpu", torch.float32, query_slice=64, max_keys=256)
    assert attention.short_pieces == [32, 16, 8, 4]
    middle = set()
    original = gpu_attention.merge_parts
    acc = attention._acc.out.data_ptr()

    def record(a, b, out, write_lse=True):
        if a.out.data_ptr() == acc and out.out.data_ptr() == acc:      # accumulator in and out
            middle.add(out.out.shape[0])
        original(a, b, out, write_lse)
    monkeypatch.setattr(gpu_attention, "merge_parts", record)
    attention._warm_merges((torch.randn(200, 2, 16), torch.randn(200, 2, 16)), torch.randn(64, (6 + 4) * 16))
    assert middle == {1, 4, 17, 48}          # and 4 again with its keys gathered from two runs


def test_gathered_key_slots_live_in_the_preallocated_buffer():
    """Slots of keys spanning runs are written into one buffer sized at start-up (no new
    allocations in a long read's steady state); past its end they still come out right."""
    from engine.layers.gpu_attention import CudaAttention
    attention = CudaAttention(4, 2, 16, 0.25, "cpu", torch.float32, query_slice=8, max_keys=64)
    runs = [(40, 3), (7, 5), (100, 2)]
    expected = [40, 41, 42, 7, 8, 9, 10, 11, 100, 101]
    first = attention._slots_of(runs, "cpu")
    assert first.tolist() == expected and first.data_ptr() == attention._slots.data_ptr()
    second = attention._slots_of(runs, "cpu")
    assert second.data_ptr() == attention._slots.data_ptr() + 10 * 8
    attention._slots_used = attention._slots.shape[0] - 4          # full: a tensor of its own
    assert attention._slots_of(runs, "cpu").tolist() == expected
