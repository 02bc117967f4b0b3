"""The Llama-family forward pass writing into a preallocated Workspace (the GPU path).

Same math as LlamaForCausalLM.forward (tests check both against transformers); the
difference is where intermediates live: matmuls write into workspace buffers (out=), norms
and RoPE run in place slice by slice, the MLP runs in token slices. The returned tensor is
a view of the workspace, valid until the next step.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..layers.rope import apply_rotary
from ..workspace import Workspace
from .step import StepContext


def linear_into(x: torch.Tensor, layer: torch.nn.Linear, out: torch.Tensor) -> None:
    if layer.bias is None:
        torch.mm(x, layer.weight.t(), out=out)
    else:
        torch.addmm(layer.bias, x, layer.weight.t(), out=out)


def rmsnorm_into(x: torch.Tensor, norm, out: torch.Tensor, ws: Workspace) -> None:
    for a, b in ws.slices(x.shape[0]):
        xs = x[a:b].float()
        xs = xs * torch.rsqrt(xs.pow(2).mean(-1, keepdim=True) + norm.eps)
        torch.mul(norm.weight, xs.to(x.dtype), out=out[a:b])


def rotate_inplace(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, ws: Workspace) -> None:
    for a, b in ws.slices(x.shape[0]):
        x[a:b] = apply_rotary(x[a:b], cos[a:b], sin[a:b])


class _TorchOps:
    """Elementwise steps in plain torch, slice by slice (CPU, or no Triton)."""

    def __init__(self, ws):
        self.ws = ws

    def add_norm(self, x, norm, out, add=None):
        if add is not None:
            x.add_(add)
        rmsnorm_into(x, norm, out, self.ws)

    def rope(self, x, cos, sin):
        rotate_inplace(x, cos, sin, self.ws)

    def silu_mul(self, gate_up, out):
        gate, up = gate_up.split(out.shape[-1], dim=-1)
        torch.mul(F.silu(gate, inplace=True), up, out=out)


class _TritonOps:
    """The same steps as single fused Triton launches (GPU path)."""

    def __init__(self):
        from ..layers import triton_ops
        self.k = triton_ops

    def add_norm(self, x, norm, out, add=None):
        self.k.add_rmsnorm(x, norm.weight, norm.eps, out, add)

    def rope(self, x, cos, sin):
        self.k.rope_inplace(x, cos, sin)

    def silu_mul(self, gate_up, out):
        self.k.silu_mul(gate_up, out)


def elementwise_ops(step: StepContext, ws: Workspace, head_dim: int):
    """Fused Triton kernels go with the GPU attention backend (which already needs Triton)."""
    if getattr(step.attention, "name", "") == "cuda" and step.cos.shape[-1] == head_dim:
        return _TritonOps()
    return _TorchOps(ws)


def forward_workspace(model, input_ids: torch.Tensor, step: StepContext, ws: Workspace) -> torch.Tensor:
    T = input_ids.shape[0]
    heads, kv_heads, head_dim = model.dims
    q_size, kv_size = heads * head_dim, kv_heads * head_dim
    ops = elementwise_ops(step, ws, head_dim)
    x, h = ws.residual[:T], ws.hidden[:T]
    torch.index_select(model.embed_tokens.weight, 0, input_ids, out=x)
    if step.image_embeds is not None:   # vision models: image positions read the vision pool
        x.index_copy_(0, step.image_embeds.rows, step.image_embeds.values)
    pending = None           # the last sublayer's output, added to x inside the next norm
    for layer in model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        ops.add_norm(x, layer.input_layernorm, h, pending)
        qkv = ws.qkv[:T]
        linear_into(h, attn.qkv_proj, qkv)
        q = qkv[:, :q_size].view(T, heads, head_dim)
        k = qkv[:, q_size:q_size + kv_size].view(T, kv_heads, head_dim)
        v = qkv[:, q_size + kv_size:].view(T, kv_heads, head_dim)
        if attn.q_norm is not None:
            for a, b in ws.slices(T):
                q[a:b], k[a:b] = attn.q_norm(q[a:b]), attn.k_norm(k[a:b])
        ops.rope(q, step.cos, step.sin)
        ops.rope(k, step.cos, step.sin)
        out = ws.attn[:T]
        step.attention.forward(q, k, v, step.kv_caches[attn.layer_idx], step.attn_meta, out=out)
        linear_into(out, attn.o_proj, ws.sublayer_out[:T])
        ops.add_norm(x, layer.post_attention_layernorm, h, ws.sublayer_out[:T])
        for a, b in ws.slices(T):
            gate_up, act = ws.gate_up[:b - a], ws.act[:b - a]
            linear_into(h[a:b], mlp.gate_up_proj, gate_up)
            ops.silu_mul(gate_up, act)
            linear_into(act, mlp.down_proj, ws.sublayer_out[a:b])
        pending = ws.sublayer_out[:T]
    x.add_(pending)
    return x
