"""`demo-vl`: a small random-weight model with the Qwen2-VL architecture, made on demand.

It exercises the whole vision path -- preprocessing at the real Qwen2-VL resize bounds,
exact image token counts, the vision pool, M-RoPE, prefill chunks split across an image,
prefix caching keyed by image content -- without a checkpoint. Its answers are meaningless.

    make_demo_model(path, seed=0)      # writes config, safetensors, tokenizer, preprocessor
    Engine(model="demo-vl")            # made once under the Longread cache, then reused
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import torch

DEMO_VL = "demo-vl"
DEMO_VERSION = 1                     # bump when the recipe changes (new cache directory)

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>",
                  "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for part in m['content'] %}"
    "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

CORPUS = [
    "Describe the image. What is in this picture? Read the text in the scan.",
    "The chart shows memory use over time; the prefill reads the prompt, decode writes the answer.",
    "A cat sits on a red chair next to a window. The sky is blue and the grass is green.",
    "Longread reads long documents, code dumps and high-resolution images.",
    "def main():\n    return 0\n",
    "Numbers 0123456789, punctuation .,;:!?()[]{} and a few words in French: le chat, la nuit.",
] * 8


def demo_tokenizer(vocab_size: int = 512):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def demo_config(tokenizer):
    from transformers import Qwen2VLConfig

    ids = {name: tokenizer.convert_tokens_to_ids(name) for name in SPECIAL_TOKENS}
    text = dict(vocab_size=len(tokenizer), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192,
                rms_norm_eps=1e-6, bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
                rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [4, 6, 6]})
    vision = dict(depth=2, embed_dim=64, hidden_size=128, num_heads=4, mlp_ratio=2)
    return Qwen2VLConfig(text_config=text, vision_config=vision, image_token_id=ids["<|image_pad|>"],
                         video_token_id=ids["<|video_pad|>"], vision_start_token_id=ids["<|vision_start|>"],
                         vision_end_token_id=ids["<|vision_end|>"])


def demo_image_processor():
    from ..image_prompt import processor_class
    # Qwen2-VL's own resize bounds, so token counts are realistic (a 4K image -> 1280 patches).
    return processor_class()(min_pixels=56 * 56, max_pixels=28 * 28 * 1280)


@torch.no_grad()
def make_demo_model(path, seed: int = 0) -> Path:
    """Write a deterministic random-weight Qwen2-VL-architecture model into `path`."""
    from transformers import Qwen2VLForConditionalGeneration

    path = Path(path)
    tokenizer = demo_tokenizer()
    model = Qwen2VLForConditionalGeneration(demo_config(tokenizer)).eval()
    generator = torch.Generator().manual_seed(seed)
    for name, param in sorted(model.named_parameters()):
        if param.dim() > 1:                       # matrices random; norms 1, biases 0
            param.copy_(torch.randn(param.shape, generator=generator) * 0.05)
        else:
            param.fill_(1.0 if name.endswith("weight") else 0.0)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(path))
    tokenizer.save_pretrained(str(path))
    demo_image_processor().save_pretrained(str(path))
    return path


def demo_model_dir(seed: int = 0) -> Path:
    """The demo model under the Longread cache, made once (atomically) on first use."""
    from ..loader import cache_root

    out = cache_root() / "models" / f"{DEMO_VL}-v{DEMO_VERSION}-seed{seed}"
    if (out / "config.json").is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".demo-vl-", dir=out.parent))
    try:
        make_demo_model(tmp, seed)
        if not (out / "config.json").is_file():
            if out.exists():
                shutil.rmtree(out)
            os.replace(tmp, out)            # a half-written directory is never seen
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out
