"""Qwen2-VL and Qwen2.5-VL: a vision tower (vision_tower.py) feeding a Qwen2 language model
(llama.py's layers) whose rotary positions are multimodal (M-RoPE, see engine/mrope.py).

The runner's VisionInputs encodes images into the vision pool and hands each step the pool
rows of the image positions it covers; `forward` puts them in place of those positions'
token embeddings. Weight names: transformers 5 (`model.visual.*`, `model.language_model.*`,
`lm_head.*`) and the original checkpoints (`visual.*`, `model.*`, `lm_head.*`) both load.
"""
from __future__ import annotations

from typing import Iterable, Iterator, Tuple

import torch
from torch import nn

from ..layers.rope import rope_parameters
from .llama import LlamaForCausalLM
from .step import StepContext
from .vision_tower import VisionTower


class _Qwen2TextView:
    """The VL text config seen as a Qwen2 config (qkv bias, untied unless the VL config ties)."""
    model_type = "qwen2"

    def __init__(self, text_config, tie_word_embeddings: bool):
        self._config = text_config
        self.tie_word_embeddings = tie_word_embeddings

    def __getattr__(self, name):
        return getattr(self._config, name)


class Qwen2VLForConditionalGeneration(nn.Module):
    model_types = ("qwen2_vl", "qwen2_5_vl")
    supports_images = True

    def __init__(self, cfg):
        super().__init__()
        self.hf_config = cfg
        text = cfg.get_text_config()
        tie = bool(getattr(cfg, "tie_word_embeddings", False))
        self.language_model = LlamaForCausalLM(_Qwen2TextView(text, tie))
        # The text config, as the engine's shape-driven parts (workspace, cost model) read it.
        self.config = self.language_model.config
        self.visual = VisionTower(cfg.vision_config, windowed=cfg.model_type == "qwen2_5_vl")
        if self.visual.out_dim != text.hidden_size:
            raise ValueError(f"vision output width {self.visual.out_dim} != text hidden size {text.hidden_size}")
        self.dims = self.language_model.dims
        self.hidden_size = text.hidden_size
        self.mrope_section = list(rope_parameters(text).get("mrope_section") or [16, 24, 24])
        self.separator_ids = (cfg.vision_start_token_id, cfg.vision_end_token_id)

    @property
    def layers(self) -> nn.ModuleList:
        return self.language_model.layers

    @property
    def embed_tokens(self) -> nn.Embedding:
        return self.language_model.embed_tokens

    def encode_image(self, pixels: torch.Tensor, grid_thw) -> torch.Tensor:
        """One whole image -> [merged patches, hidden] input embeddings."""
        return self.visual(pixels, grid_thw)

    def separator_embeddings(self) -> Tuple[torch.Tensor, torch.Tensor]:
        """Embedding rows of <|vision_start|> and <|vision_end|> ([1, hidden] each)."""
        weight = self.language_model.embed_tokens.weight
        return weight[self.separator_ids[0]:self.separator_ids[0] + 1], weight[self.separator_ids[1]:self.separator_ids[1] + 1]

    def forward(self, input_ids: torch.Tensor, step: StepContext) -> torch.Tensor:
        x = self.language_model.embed_tokens(input_ids)
        if step.image_embeds is not None:
            x.index_copy_(0, step.image_embeds.rows, step.image_embeds.values.to(x.dtype))
        for layer in self.language_model.layers:
            x = layer(x, step)
        return x

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.language_model.compute_logits(hidden)

    # --- weights ---------------------------------------------------------------------------
    @torch.no_grad()
    def load_weights(self, weights: Iterable[Tuple[str, torch.Tensor]]) -> None:
        vision = dict(self.visual.named_parameters())
        loaded = set()

        def text_weights() -> Iterator[Tuple[str, torch.Tensor]]:
            for name, tensor in weights:
                for prefix in ("model.visual.", "visual."):
                    if name.startswith(prefix):
                        self._load_vision(vision, name[len(prefix):], name, tensor)
                        loaded.add(name[len(prefix):])
                        break
                else:   # the language model's loader strips one leading "model."
                    yield name.replace("model.language_model.", "model.", 1), tensor

        self.language_model.load_weights(text_weights())
        missing = sorted(set(vision) - loaded)
        if missing:
            raise ValueError("checkpoint is missing weights: " + ", ".join("visual." + n for n in missing[:8])
                             + (" ..." if len(missing) > 8 else ""))

    @staticmethod
    def _load_vision(params: dict, name: str, hf_name: str, tensor: torch.Tensor) -> None:
        if name not in params:
            raise ValueError(f"checkpoint has an unexpected weight {hf_name!r}")
        if params[name].shape != tensor.shape:
            raise ValueError(f"weight {hf_name!r} has shape {tuple(tensor.shape)}, "
                             f"expected {tuple(params[name].shape)}")
        params[name].copy_(tensor)
