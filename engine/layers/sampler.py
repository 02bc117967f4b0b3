"""Token sampling: greedy, temperature, top-k, top-p, per-request seeds, top-k logprobs."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import torch

from ..config import SamplingParams
from ..outputs import Logprob


def _filter_top_k_top_p(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    if top_k and 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        probs = sorted_logits.softmax(-1)
        # Drop a token when the mass before it already reaches top_p (always keep the first).
        drop = (probs.cumsum(-1) - probs) >= top_p
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        logits = torch.empty_like(logits).scatter_(0, order, sorted_logits)
    return logits


def _logprobs(raw: torch.Tensor, token: int, k: int) -> Dict[int, Logprob]:
    logp = raw.log_softmax(-1)
    chosen = float(logp[token])
    rank = int((logp > logp[token]).sum()) + 1
    result = {token: Logprob(chosen, rank)}
    if k > 0:
        values, ids = torch.topk(logp, k)
        for r, (v, t) in enumerate(zip(values.tolist(), ids.tolist()), start=1):
            result.setdefault(t, Logprob(v, r))
    return result


def sample(logits: torch.Tensor, params: Sequence[SamplingParams],
           generators: Sequence[Optional[torch.Generator]]) -> Tuple[List[int], List[Optional[dict]]]:
    """logits: [N, V] float32 on any device. Returns token ids and per-row logprob dicts."""
    n = logits.shape[0]
    tokens: List[int] = [0] * n
    greedy_rows = [i for i, p in enumerate(params) if p.greedy]
    if len(greedy_rows) == n:
        tokens = logits.argmax(-1).tolist()          # the common case: one op, one sync
    elif greedy_rows:
        picked = logits[greedy_rows].argmax(-1).tolist()
        for i, t in zip(greedy_rows, picked):
            tokens[i] = t
    for i, p in enumerate(params):
        if p.greedy:
            continue
        row = _filter_top_k_top_p(logits[i] / p.temperature, p.top_k, p.top_p)
        probs = row.softmax(-1, dtype=torch.float32).cpu()
        tokens[i] = int(torch.multinomial(probs, 1, generator=generators[i]))
    logprobs: List[Optional[dict]] = [None] * n
    for i, p in enumerate(params):
        if p.logprobs is not None:
            logprobs[i] = _logprobs(logits[i].float().cpu(), tokens[i], p.logprobs)
    return tokens, logprobs


def sample_on_device(logits: torch.Tensor, params: Sequence[SamplingParams],
                     generator: torch.Generator) -> torch.Tensor:
    """Token ids [N] left on the logits' device, with no host sync (so the next step can be
    launched from them): argmax for greedy rows, a draw from the temperature / top-k / top-p
    distribution for the others, all from one generator on that device. Rows with their own
    seed or with logprobs go through `sample` instead."""
    tokens = logits.argmax(-1)
    for i, p in enumerate(params):
        if not p.greedy:
            row = _filter_top_k_top_p(logits[i] / p.temperature, p.top_k, p.top_p)
            tokens[i] = torch.multinomial(row.softmax(-1, dtype=torch.float32), 1, generator=generator)[0]
    return tokens
