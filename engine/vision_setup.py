"""What a vision model adds to the engine, built once at start-up.

  * the image processor and prompt builder (images -> exact placeholder runs),
  * the vision pool, sized from the config and allocated now (never resized),
  * the runner's per-step vision inputs,
  * the submission checks: an image that can never be served is refused with its count,
    the limit and the setting to change, before any device work.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple

from .errors import ImageTooLargeError
from .image_prompt import ImagePromptBuilder, load_image_processor, processor_max_pixels
from .mrope import mrope_positions
from .multimodal import image_token_count, largest_image_grid
from .request import MultiModalItem, Request
from .vision_cache import VisionCache
from .vision_inputs import VisionInputs

log = logging.getLogger("longread.vision")

DEFAULT_POOL_IMAGES = 4          # default vision pool: this many images of max_image_tokens


class VisionSupport:
    def __init__(self, model, builder: ImagePromptBuilder, cache: VisionCache,
                 max_image_tokens: int, max_pixels: int):
        self.model, self.builder, self.cache = model, builder, cache
        self.max_image_tokens, self.max_pixels = max_image_tokens, max_pixels
        self.inputs: Optional[VisionInputs] = None

    def connect(self, runner) -> None:
        """Hand the runner its per-step vision inputs (they share its rotary table)."""
        self.inputs = VisionInputs(self.model, self.cache, runner.rope, runner.device)
        runner.multimodal = self.inputs

    def expand(self, token_ids: Sequence[int], images: Sequence[Any]) -> Tuple[List[int], List[MultiModalItem]]:
        return self.builder.expand(token_ids, images)

    def check(self, items: Sequence[MultiModalItem], max_model_len: int, kv_capacity_tokens: int) -> None:
        """Refuse an image that no amount of waiting would let the engine serve."""
        limits = [
            (self.max_image_tokens, "max_image_tokens",
             f"raise max_image_tokens, or lower max_pixels (now {self.max_pixels}) so images are resized smaller"),
            (self.cache.capacity_tokens, "vision_cache_tokens", "raise vision_cache_tokens"),
            (max_model_len - 1, "max_model_len minus 1 token to answer",
             f"raise max_model_len, or lower max_pixels (now {self.max_pixels})"),
            (kv_capacity_tokens - 1, "KV cache capacity", "raise kv_cache_memory"),
        ]
        for item in items:
            for limit, setting, fix in limits:
                if item.length > limit:
                    raise ImageTooLargeError(item.data.description, item.length, limit, setting, fix)

    def attach(self, request: Request) -> None:
        """Give a request its multimodal rotary positions (host side, once)."""
        request.mrope_positions, request.mrope_delta = mrope_positions(
            request.num_prompt_tokens, request.mm_items, self.builder.merge_size)

    def stats(self) -> dict:
        return {**self.cache.stats(), "max_image_tokens": self.max_image_tokens}


def _ensure_chat_template(tokenizer, model_dir: Optional[Path]) -> None:
    """VL checkpoints often ship the chat template beside the processor, not the tokenizer."""
    if getattr(tokenizer, "chat_template", None) or model_dir is None:
        return
    jinja, js = model_dir / "chat_template.jinja", model_dir / "chat_template.json"
    if jinja.is_file():
        tokenizer.chat_template = jinja.read_text()
    elif js.is_file():
        tokenizer.chat_template = json.loads(js.read_text()).get("chat_template")


def build_vision(config, model, hf_config, model_dir: Optional[Path], tokenizer, device, dtype) -> VisionSupport:
    processor = load_image_processor(model_dir, config.min_pixels, config.max_pixels)
    vcfg = hf_config.vision_config
    if (processor.patch_size, processor.merge_size) != (vcfg.patch_size, vcfg.spatial_merge_size):
        raise ValueError(f"preprocessor patch/merge size {processor.patch_size}/{processor.merge_size} "
                         f"differ from the vision config's {vcfg.patch_size}/{vcfg.spatial_merge_size}")
    merge = processor.merge_size
    max_pixels = processor_max_pixels(processor)
    largest = image_token_count(largest_image_grid(max_pixels, processor.patch_size, merge), merge)
    max_image_tokens = config.max_image_tokens or largest
    pool_tokens = config.vision_cache_tokens or DEFAULT_POOL_IMAGES * max_image_tokens
    # The pool must hold the largest admissible image, or a waiting image could wait forever.
    if pool_tokens < max_image_tokens:
        raise ValueError(f"vision_cache_tokens={pool_tokens} cannot hold one image of "
                         f"max_image_tokens={max_image_tokens}; raise vision_cache_tokens or "
                         f"lower max_image_tokens")
    cache = VisionCache(pool_tokens, model.hidden_size, device, dtype)
    _ensure_chat_template(tokenizer, model_dir)
    builder = ImagePromptBuilder(processor, hf_config.image_token_id, hf_config.vision_start_token_id,
                                 hf_config.vision_end_token_id)
    log.info("vision pool: %d tokens (%.1f MiB); max_image_tokens %d; max_pixels %d",
             pool_tokens, cache.nbytes / 2 ** 20, max_image_tokens, max_pixels)
    return VisionSupport(model, builder, cache, max_image_tokens, max_pixels)
