"""Images into prompt tokens: preprocess each image, expand its placeholder to the exact count.

A prompt marks each image as <|vision_start|><|image_pad|><|vision_end|> (the Qwen2-VL chat
template writes exactly this; so does a vLLM-style {"prompt", "multi_modal_data"} prompt).
The builder replaces the single <|image_pad|> with image_token_count - 2 pads, so the
item <|vision_start|> pads <|vision_end|> spans exactly image_token_count positions.

Preprocessing uses transformers' PIL-based Qwen2VLImageProcessor (no torchvision).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple

from .errors import RequestRejected
from .multimodal import (NUM_SEPARATORS, ImageData, describe_image, image_content_hash,
                         image_token_count, load_image)
from .request import MultiModalItem

IMAGE_PLACEHOLDER = "<|vision_start|><|image_pad|><|vision_end|>"


def processor_class():
    try:   # transformers >= 5.x names the PIL backend explicitly
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
        return Qwen2VLImageProcessorPil
    except ImportError:
        from transformers import Qwen2VLImageProcessor
        return Qwen2VLImageProcessor


def load_image_processor(model_dir: Optional[Path], min_pixels: Optional[int] = None,
                         max_pixels: Optional[int] = None):
    """The model's preprocessor_config.json (transformers' Qwen2-VL defaults without one, e.g.
    for an in-memory model), with min/max_pixels overridden when given."""
    path = Path(model_dir) / "preprocessor_config.json" if model_dir is not None else None
    saved = json.loads(path.read_text()) if path is not None and path.is_file() else {}
    keys = ("patch_size", "temporal_patch_size", "merge_size", "image_mean", "image_std")
    kwargs = {k: saved[k] for k in keys if k in saved}
    size = saved.get("size") or {}
    low = min_pixels or saved.get("min_pixels") or size.get("shortest_edge")
    high = max_pixels or saved.get("max_pixels") or size.get("longest_edge")
    if low:
        kwargs["min_pixels"] = int(low)
    if high:
        kwargs["max_pixels"] = int(high)
    return processor_class()(**kwargs)


def processor_max_pixels(processor) -> int:
    size = processor.size
    value = size.get("longest_edge") if isinstance(size, dict) else getattr(size, "longest_edge", None)
    return int(value or getattr(processor, "max_pixels"))


class ImagePromptBuilder:
    def __init__(self, processor, image_token_id: int, vision_start_id: int, vision_end_id: int):
        self.processor = processor
        self.merge_size = int(processor.merge_size)
        self.image_token_id, self.start_id, self.end_id = image_token_id, vision_start_id, vision_end_id

    def preprocess(self, image: Any, index: int) -> Tuple[ImageData, str]:
        """(pixel data, content hash) of one image; host-side work only."""
        try:
            pil = load_image(image)
        except (OSError, ValueError, TypeError) as exc:
            raise RequestRejected(f"image {index + 1}: cannot be read ({exc})") from None
        batch = self.processor(images=[pil], return_tensors="pt")
        grid = tuple(int(x) for x in batch["image_grid_thw"][0].tolist())
        data = ImageData(batch["pixel_values"].float(), grid, describe_image(pil, index, image))
        # The grid is part of the key: the same pixels resized differently are different inputs.
        return data, f"{image_content_hash(pil)}:{grid[0]}x{grid[1]}x{grid[2]}"

    def expand(self, token_ids: Sequence[int], images: Sequence[Any]) -> Tuple[List[int], List[MultiModalItem]]:
        """Replace each image's single <|image_pad|> with its exact placeholder count."""
        pads = [i for i, t in enumerate(token_ids) if t == self.image_token_id]
        if len(pads) != len(images):
            raise RequestRejected(f"the prompt has {len(pads)} image placeholder(s) {IMAGE_PLACEHOLDER} "
                                  f"but {len(images)} image(s) were given")
        ids: List[int] = []
        items: List[MultiModalItem] = []
        done = 0
        for index, (pad, image) in enumerate(zip(pads, images)):
            framed = (0 < pad < len(token_ids) - 1 and token_ids[pad - 1] == self.start_id
                      and token_ids[pad + 1] == self.end_id)
            if not framed:
                raise RequestRejected(f"image {index + 1}: its placeholder must be written {IMAGE_PLACEHOLDER}")
            data, content_hash = self.preprocess(image, index)
            count = image_token_count(data.grid_thw, self.merge_size)
            ids.extend(token_ids[done:pad - 1])
            items.append(MultiModalItem(offset=len(ids), length=count, content_hash=content_hash, data=data))
            ids.append(self.start_id)
            ids.extend([self.image_token_id] * (count - NUM_SEPARATORS))
            ids.append(self.end_id)
            done = pad + 2
        ids.extend(token_ids[done:])
        return ids, items
