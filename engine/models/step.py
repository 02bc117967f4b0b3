"""Per-step state shared by every layer: built once by the runner, read by all layers."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Tuple

import torch

from ..layers.attention import AttentionMetadata


@dataclass
class StepContext:
    positions: torch.Tensor                      # [T]
    cos: torch.Tensor                            # [T, 1, rotary_dim], gathered once per step
    sin: torch.Tensor
    attn_meta: AttentionMetadata
    attention: Any                               # the attention backend
    kv_caches: List[Tuple[torch.Tensor, torch.Tensor]]
    image_embeds: Any = None                     # vision models: rows replaced by image embeddings
