"""The operator wind tunnel: time one op at given shapes against its reference, with a
correctness check, in seconds — without starting the app or loading a model.

    python -m bench.ops --op attention_decode --batch 32 --context 2048
    python -m bench.ops --op all --device cuda

Ops: rmsnorm, rope, mlp, attention_prefill, attention_decode, sampler. Shapes default to
the Qwen2.5-7B layer (hidden 3584, 28/4 heads of 128, intermediate 18944).
"""
from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from .common import print_table, sync, write_result

OPS = ["rmsnorm", "rope", "mlp", "attention_prefill", "attention_decode", "sampler"]


def timeit(fn, device, reps=20):
    for _ in range(3):
        fn()
    sync(device)
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    sync(device)
    return (time.perf_counter() - start) / reps


def rel_err(out, ref):
    out, ref = out.float().cpu(), ref.float().cpu()
    return float((out - ref).norm() / ref.norm().clamp_min(1e-12))


def case(name, args, dev, dtype):
    g = torch.Generator(device="cpu").manual_seed(0)
    rand = lambda *s: torch.randn(*s, generator=g).to(dev, dtype)
    H, KVH, D, hid, inter = args.heads, args.kv_heads, args.head_dim, args.hidden, args.intermediate
    T = args.tokens
    if name == "rmsnorm":
        from engine.layers.norm import RMSNorm
        from engine.models.workspace_forward import rmsnorm_into
        from engine.workspace import Workspace
        norm = RMSNorm(hid, 1e-6).to(dev, dtype)
        x, out = rand(T, hid), torch.empty(T, hid, device=dev, dtype=dtype)
        ws = type("W", (), {"slices": Workspace.slices, "slice_tokens": args.slice})()
        ours = lambda: rmsnorm_into(x, norm, out, ws) or out
        ref = lambda: norm(x.double()).to(dtype)
        return ours, ref, 3 * T * hid * x.element_size()
    if name == "rope":
        from engine.layers.rope import apply_rotary
        q = rand(T, H, D)
        pos = torch.arange(T, device=dev)
        inv = 1.0 / (1e6 ** (torch.arange(0, D, 2, device=dev).float() / D))
        emb = torch.cat([torch.outer(pos.float(), inv)] * 2, -1)
        cos, sin = emb.cos().to(dtype)[:, None], emb.sin().to(dtype)[:, None]
        ours = lambda: apply_rotary(q, cos, sin)
        ref = lambda: apply_rotary(q.double(), cos.double(), sin.double())
        return ours, ref, 2 * q.numel() * q.element_size()
    if name == "mlp":
        gu, down = rand(2 * inter, hid) * 0.02, rand(hid, inter) * 0.02
        x = rand(T, hid)
        def ours():
            a, b = F.linear(x, gu).split(inter, -1)
            return F.linear(F.silu(a) * b, down)
        ref = lambda: F.linear(F.silu(F.linear(x.float(), gu.float()).split(inter, -1)[0]) *
                               F.linear(x.float(), gu.float()).split(inter, -1)[1], down.float())
        return ours, ref, 2 * T * 3 * hid * inter
    if name in ("attention_prefill", "attention_decode"):
        from engine.layers.attention import AttentionMetadata
        decode = name == "attention_decode"
        B, C = (args.batch, args.context) if decode else (1, args.context)
        bs = 16
        blocks = B * -(-C // bs)
        kc, vc = rand(blocks * bs, KVH, D), rand(blocks * bs, KVH, D)
        perm = torch.randperm(blocks, generator=g).tolist()
        tables = [perm[i * (blocks // B):(i + 1) * (blocks // B)] for i in range(B)]
        n = 1 if decode else min(args.tokens, C)
        q, k, v = rand(B * n, H, D), rand(B * n, KVH, D), rand(B * n, KVH, D)
        slots = torch.tensor([t[(C - n + j) // bs] * bs + (C - n + j) % bs for t in tables for j in range(n)], device=dev)
        meta = AttentionMetadata([i * n for i in range(B)], [n] * B, [C - n] * B, slots, tables, bs)
        if dev.type == "cuda":
            from engine.layers.gpu_attention import CudaAttention
            backend = CudaAttention(H, KVH, D, D ** -0.5, dev, dtype, query_slice=args.slice,
                                    kernel=args.kernel)
        else:
            from engine.layers.attention import TorchAttention
            backend = TorchAttention(H, KVH, D, D ** -0.5)
        backend.prepare(meta, dev)
        ours = lambda: backend.forward(q, k, v, (kc, vc), meta)

        def ref():
            outs = []
            for i, t in enumerate(tables):
                pos = torch.arange(C, device=dev)
                idx = torch.tensor(t, device=dev)[pos // bs] * bs + pos % bs
                kk = kc.index_select(0, idx).double().repeat_interleave(H // KVH, 1).transpose(0, 1)
                vv = vc.index_select(0, idx).double().repeat_interleave(H // KVH, 1).transpose(0, 1)
                qq = q[i * n:(i + 1) * n].double().transpose(0, 1)
                mask = pos[None, :] <= (torch.arange(n, device=dev)[:, None] + C - n)
                outs.append(F.scaled_dot_product_attention(qq, kk, vv, attn_mask=mask, scale=D ** -0.5).transpose(0, 1))
            return torch.cat(outs)
        flops = 4 * B * n * (C - n / 2) * H * D
        return ours, ref, flops
    if name == "sampler":
        from engine.config import SamplingParams
        from engine.layers.sampler import sample
        logits = torch.randn(args.batch, args.vocab, generator=g).to(dev)
        params = [SamplingParams(temperature=0)] * args.batch
        ours = lambda: torch.tensor(sample(logits, params, [None] * args.batch)[0])
        ref = lambda: logits.double().argmax(-1).cpu()
        return ours, ref, logits.numel() * 4
    raise ValueError(name)


def graph_time(fn, calls=20, reps=5):
    """GPU time of one call, from replays of a CUDA graph of `calls` calls (no launch gaps)."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    graph.replay()
    start.record()
    for _ in range(reps):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1000 / (reps * calls)


def sweep_decode(args, dev, dtype):
    """Paged decode attention at batch x context for several launch shapes (bytes/s of KV read)."""
    from engine.layers import triton_decode
    rows = []
    for batch, context in ((args.batch, args.context), (1, args.context), (8, args.context)):
        args.batch, args.context = batch, context
        for per_sm in (1, 2, 4, 8):
            for warps in (2, 4, 8):
                triton_decode.PROGRAMS_PER_SM, triton_decode.NUM_WARPS = per_sm, warps
                ours, ref, _ = case("attention_decode", args, dev, dtype)
                err = rel_err(ours(), ref())
                seconds = graph_time(ours)
                kv_bytes = batch * context * 2 * args.kv_heads * args.head_dim * 2
                rows.append({"batch": batch, "context": context, "programs_per_sm": per_sm, "warps": warps,
                             "us": seconds * 1e6, "kv_gbps": kv_bytes / seconds / 1e9, "rel_err": err})
                print_table(rows[-1:], list(rows[-1]))
    write_result("ops_decode_sweep", args.device, {"dtype": str(dtype), "rows": rows}, args.out_dir)


@torch.inference_mode()
def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--op", default="all", choices=OPS + ["all"])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default=None)
    p.add_argument("--tokens", type=int, default=None)
    p.add_argument("--context", type=int, default=None)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--slice", type=int, default=2048)
    p.add_argument("--hidden", type=int, default=3584)
    p.add_argument("--intermediate", type=int, default=18944)
    p.add_argument("--heads", type=int, default=28)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--vocab", type=int, default=152064)
    p.add_argument("--kernel", default=None, help="GPU prefill kernel: cudnn, flash, efficient, math")
    p.add_argument("--sweep-decode", action="store_true",
                   help="attention_decode at several programs-per-SM and warp counts")
    p.add_argument("--out-dir", default=None)
    args = p.parse_args(argv)
    dev = torch.device(args.device)
    gpu = dev.type == "cuda"
    dtype = getattr(torch, args.dtype) if args.dtype else (torch.bfloat16 if gpu else torch.float32)
    args.tokens = args.tokens or (8192 if gpu else 512)
    args.context = args.context or (32768 if gpu else 2048)
    rows = []
    if args.sweep_decode:
        return sweep_decode(args, dev, dtype)
    for name in OPS if args.op == "all" else [args.op]:
        ours, ref, work = case(name, args, dev, dtype)
        err = rel_err(ours(), ref())
        seconds = timeit(ours, args.device)
        unit = "TF/s" if name in ("mlp", "attention_prefill", "attention_decode") else "GB/s"
        rate = work / seconds / (1e12 if unit == "TF/s" else 1e9)
        rows.append({"op": name, "seconds": seconds, "rate": rate, "unit": unit, "rel_err": err,
                     "ok": err < (2e-2 if dtype != torch.float32 else 1e-4)})
        print_table(rows[-1:], list(rows[-1]))
    write_result("ops", args.device, {"dtype": str(dtype), "shapes": vars(args), "rows": rows}, args.out_dir)
    print_table(rows, ["op", "seconds", "rate", "unit", "rel_err", "ok"])


if __name__ == "__main__":
    main()
