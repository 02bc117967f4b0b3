"""Tiny random Qwen2-VL / Qwen2.5-VL models for the vision tests, and their transformers twin.

Both our engine and transformers load the same directory; transformers gets the same
pixel_values / image_grid_thw from the same PIL image processor (float32 throughout).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from engine.image_prompt import load_image_processor
from engine.models.demo_vl import SPECIAL_TOKENS, demo_tokenizer

from .tiny_models import save_with_random_weights

MAX_PIXELS = 28 * 28 * 64            # at most 64 merged patches: small, fast images


def make_config(kind: str, tokenizer):
    from transformers import Qwen2_5_VLConfig, Qwen2VLConfig

    ids = {name: tokenizer.convert_tokens_to_ids(name) for name in SPECIAL_TOKENS}
    text = dict(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048, rms_norm_eps=1e-6,
                bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]})
    special = dict(image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
                   vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"])
    if kind == "qwen2_vl":
        vision = dict(depth=2, embed_dim=32, hidden_size=64, num_heads=2, mlp_ratio=2)
        return Qwen2VLConfig(text_config=text, vision_config=vision, **special)
    # window_size 56 px = 2x2 merged patches per window: images get full and partial windows.
    vision = dict(depth=3, hidden_size=32, out_hidden_size=64, intermediate_size=48, num_heads=2,
                  window_size=56, fullatt_block_indexes=[1])
    return Qwen2_5_VLConfig(text_config=text, vision_config=vision, **special)


def save_tiny_vl_model(path: Path, kind: str = "qwen2_vl", seed: int = 0) -> Path:
    from transformers import AutoModelForImageTextToText

    tokenizer = demo_tokenizer()
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(make_config(kind, tokenizer), dtype=torch.float32)
    path = save_with_random_weights(model, tokenizer, path)
    processor = load_image_processor(path, min_pixels=56 * 56, max_pixels=MAX_PIXELS)
    processor.save_pretrained(str(path))
    return path


def load_vl_reference(path: Path):
    from transformers import AutoModelForImageTextToText
    return AutoModelForImageTextToText.from_pretrained(str(path), dtype=torch.float32).eval()


def random_image(width: int, height: int, seed: int):
    from PIL import Image
    pixels = np.random.RandomState(seed).randint(0, 255, (height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


def reference_inputs(path: Path, prompt_token_ids, images, image_token_id: int) -> dict:
    """transformers' inputs for our expanded prompt: same ids, same pixel data."""
    ids = torch.tensor([prompt_token_ids])
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
              "mm_token_type_ids": (ids == image_token_id).int()}
    if images:
        batch = load_image_processor(path)(images=list(images), return_tensors="pt")
        inputs.update(pixel_values=batch["pixel_values"], image_grid_thw=batch["image_grid_thw"])
    return inputs


@torch.no_grad()
def reference_logits(model, inputs: dict) -> torch.Tensor:
    return model(**inputs).logits[0].float()


@torch.no_grad()
def reference_greedy(model, inputs: dict, max_new_tokens: int):
    out = model.generate(**inputs, max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens,
                         do_sample=False, eos_token_id=None, pad_token_id=0)
    return out[0, inputs["input_ids"].shape[1]:].tolist()


def cpu_engine(model, **settings):
    """Our engine on the CPU in float32 (exact parity), also on a host with a GPU."""
    from engine import Engine
    return Engine(model=str(model), device="cpu", dtype="float32", **settings)
