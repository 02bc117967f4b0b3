"""Images in prompts: the one token count, content hashes, preprocessed image data.

Token accounting has exactly one source, `image_token_count`: an image occupies
t*h*w / merge² placeholder positions (its merged patches) plus its <|vision_start|> and
<|vision_end|> separators. The prompt builder, the submission checks, the scheduler's vision
reservations and the vision pool's row count all use this number and no other.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence, Tuple

import torch

NUM_SEPARATORS = 2        # <|vision_start|> before the placeholders, <|vision_end|> after


def image_token_count(grid_thw: Sequence[int], merge_size: int) -> int:
    """Prompt positions one image occupies: merged patches + its two separator tokens."""
    t, h, w = (int(x) for x in grid_thw)
    if h % merge_size or w % merge_size:
        raise ValueError(f"patch grid {t}x{h}x{w} is not divisible by the merge size {merge_size}")
    return t * h * w // (merge_size * merge_size) + NUM_SEPARATORS


def largest_image_grid(max_pixels: int, patch_size: int, merge_size: int) -> Tuple[int, int, int]:
    """A grid with the most merged patches the resize bounds allow (for the default budget).

    The processor keeps h*w <= max_pixels with both sides multiples of patch*merge, so at
    most max_pixels // (patch*merge)² merged patches; every grid with that many has the
    same token count, so a 1-row grid stands for all of them.
    """
    factor = patch_size * merge_size
    merged = max(1, max_pixels // (factor * factor))
    return 1, merge_size, merged * merge_size


@dataclass
class ImageData:
    """One preprocessed image, host side. Kept until its request ends (a preempted request
    re-encodes from here)."""
    pixel_values: torch.Tensor          # [patches, channels*temporal*patch*patch], float32, CPU
    grid_thw: Tuple[int, int, int]      # patch grid (before the 2x2 merge)
    description: str                    # names the image in error messages


def load_image(image: Any):
    """A PIL image from a PIL image or a local path (str, Path, or file:// URL)."""
    from PIL import Image

    if isinstance(image, Image.Image):
        return image
    if isinstance(image, (str, Path)):
        path = str(image)
        if path.startswith("file://"):
            path = path[len("file://"):]
        if "://" in path:
            raise ValueError(f"image {path!r}: only local files are supported (no downloads)")
        with Image.open(path) as opened:
            opened.load()
            return opened.copy()
    raise TypeError(f"an image must be a PIL.Image or a local path, got {type(image).__name__}")


def image_content_hash(image) -> str:
    """Hash of the pixels (mode, size and raw bytes): equal images share KV, others never do."""
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{image.mode}|{image.size[0]}x{image.size[1]}|".encode())
    h.update(image.tobytes())
    return h.hexdigest()


def describe_image(image, index: int, source: Any) -> str:
    name = f"{Path(str(source)).name}, " if isinstance(source, (str, Path)) else ""
    return f"image {index + 1} ({name}{image.size[0]}x{image.size[1]} {image.mode})"
