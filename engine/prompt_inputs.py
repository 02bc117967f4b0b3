"""Every prompt form the engine accepts -> (text, token ids, images in placeholder order).

Forms: a string; a token id list; {"prompt": str} or {"prompt_token_ids": [...]}, either with
"multi_modal_data": {"image": image | [images]} (vLLM's shape); chat messages in the
transformers format, where a content list may hold {"type": "text", "text": ...} and
{"type": "image", "image": PIL.Image | path} parts.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional, Sequence, Tuple

IMAGE_KEYS = ("image", "path", "url", "image_url")


@dataclass
class PromptInput:
    text: Optional[str]
    token_ids: List[int]
    images: List[Any] = field(default_factory=list)


def is_messages(obj) -> bool:
    return isinstance(obj, (list, tuple)) and bool(obj) and isinstance(obj[0], dict) and "role" in obj[0]


def _image_of(part: dict) -> Any:
    for key in IMAGE_KEYS:
        value = part.get(key)
        if isinstance(value, dict):          # {"type": "image_url", "image_url": {"url": ...}}
            value = value.get("url")
        if value is not None:
            return value
    return None


def _is_image_part(part) -> bool:
    return isinstance(part, dict) and (part.get("type") in ("image", "image_url")
                                       or (part.get("type") is None and _image_of(part) is not None))


def split_images(messages: Sequence[dict], keep_parts: bool) -> Tuple[List[dict], List[Any]]:
    """Messages for the chat template, and their images in order of appearance.

    keep_parts: vision templates render content lists (an image part becomes the image
    placeholder), so parts stay, images reduced to {"type": "image"}. Otherwise text parts
    are joined into one string, as text-only templates expect.
    """
    rendered, images = [], []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            rendered.append(message)
            continue
        parts, texts = [], []
        for part in content:
            if _is_image_part(part):
                images.append(_image_of(part))
                parts.append({"type": "image"})
            elif isinstance(part, dict):
                parts.append(part)
                texts.append(part.get("text", ""))
            else:
                parts.append({"type": "text", "text": str(part)})
                texts.append(str(part))
        rendered.append({**message, "content": parts if keep_parts else "\n".join(texts)})
    return rendered, images


def _images_of(data: Optional[dict]) -> List[Any]:
    images = (data or {}).get("image")
    if images is None:
        return []
    return list(images) if isinstance(images, (list, tuple)) else [images]


def parse_prompt(prompt: Any, tokenizer, render_chat: Callable[[List[dict]], str],
                 keep_image_parts: bool) -> PromptInput:
    if isinstance(prompt, dict):
        images = _images_of(prompt.get("multi_modal_data"))
        if "prompt_token_ids" in prompt:
            return PromptInput(prompt.get("prompt"), [int(t) for t in prompt["prompt_token_ids"]], images)
        text = prompt["prompt"]
        return PromptInput(text, tokenizer(text)["input_ids"], images)
    if isinstance(prompt, str):
        return PromptInput(prompt, tokenizer(prompt)["input_ids"])
    if is_messages(prompt):
        messages, images = split_images(prompt, keep_image_parts)
        text = render_chat(messages)
        return PromptInput(text, tokenizer(text, add_special_tokens=False)["input_ids"], images)
    return PromptInput(None, [int(t) for t in prompt])
