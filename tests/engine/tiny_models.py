"""Tiny random HF models + a tiny byte-level BPE tokenizer, saved to a directory.

Our engine loads them through its normal loader; transformers runs the same weights as the
correctness oracle (float32).
"""
from __future__ import annotations

from pathlib import Path

import torch

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Longread reads long documents: PDFs, code dumps and images.",
    "def main():\n    print('hello world')\n    return 0\n",
    "Paris is the capital of France. Berlin is the capital of Germany.",
    "Prefill reads the prompt; decode writes the answer, one token at a time.",
    "Ünïcödé tëxt, 中文字符, emoji 🙂 and numbers 12345 67890.",
] * 4

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def build_tokenizer(vocab_size: int = 384):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def make_config(family: str, vocab_size: int, **overrides):
    from transformers import LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config
    common = dict(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                  rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=2, pad_token_id=0)
    common.update(overrides)
    if family == "llama":
        return LlamaConfig(**common)
    if family == "qwen2":
        return Qwen2Config(**common)
    if family == "mistral":
        return MistralConfig(sliding_window=None, **common)
    if family == "qwen3":
        return Qwen3Config(head_dim=32, **common)
    raise ValueError(family)


def save_tiny_model(path: Path, family: str = "llama", seed: int = 0, **overrides) -> Path:
    """Random-weight model of `family` in `path` (safetensors + tokenizer). Returns path."""
    from transformers import AutoModelForCausalLM

    tokenizer = build_tokenizer()
    config = make_config(family, len(tokenizer), **overrides)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    return save_with_random_weights(model, tokenizer, path)


@torch.no_grad()
def save_with_random_weights(model, tokenizer, path: Path) -> Path:
    """Redraw the matrices N(0, 0.1) (larger than the default init: less flat logits), save."""
    for p in model.parameters():
        if p.dim() > 1:
            p.normal_(0, 0.1)
    path = Path(path)
    model.save_pretrained(str(path))
    tokenizer.save_pretrained(str(path))
    return path


def load_reference(path: Path):
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    return model.eval()


@torch.no_grad()
def reference_greedy(model, prompt_ids, max_new_tokens: int):
    ids = torch.tensor([prompt_ids])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                         min_new_tokens=max_new_tokens, do_sample=False, eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt_ids):].tolist()


def check_answers_and_prefix_hit(engine, reference, prompts, params, follow_tokens: int) -> dict:
    """Batched greedy answers match transformers; so does a follow-up that hits the prefix
    cache (its new blocks are not consecutive with the cached ones); no block leaks.
    Returns the engine's stats."""
    n = params.max_tokens
    outs = engine.generate(prompts, params)
    assert [o.outputs[0].token_ids for o in outs] == [reference_greedy(reference, p, n) for p in prompts]
    follow = prompts[0] + outs[0].outputs[0].token_ids + prompts[1][:follow_tokens]
    again = engine.generate([follow], params)[0]
    assert again.num_cached_tokens > 0
    assert again.outputs[0].token_ids == reference_greedy(reference, follow, n)
    stats = engine.stats()
    assert stats["kv_blocks_free"] == stats["kv_blocks_total"]
    return stats


# A small float32 engine on the GPU path whose chunks, query slices and MLP slices are all
# shorter than the test prompts (so every split and merge runs); GPU parity tests share it.
SMALL_GPU_ENGINE = dict(device="cuda", dtype="float32", block_size=4, max_num_batched_tokens=16,
                        workspace_slice_tokens=6, attention_query_slice=6, max_num_seqs=8)
