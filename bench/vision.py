"""Vision prefill: our engine vs transformers, same device, same random weights, same run.

    python -m bench.vision --device cuda            # Qwen2-VL-7B-shaped, random bf16 weights
    python -m bench.vision --device cpu --tiny      # a tiny config in float32 (checks the script)

For a 4096x4096 image at each --max-pixels (default: transformers' Qwen2-VL default, 28*28*1280
= 1003520 pixels; Qwen2-VL-7B-Instruct's preprocessor ships 12845056):
  ours:         preprocessing (host), encode (vision tower), cold TTFT (encode + prefill through
                the engine: scheduler, vision pool, paged KV), warm TTFT (prefix-cache hit);
  transformers: encode (get_image_features) and encode + prefill (one forward, last logits).
Memory: the vision pool and the KV pool (capacity and what this image's request used), and
each side's peak temporaries above its resident memory. Figures are reported, not asserted.
"""
from __future__ import annotations

import argparse
import inspect
import statistics
import time
from typing import Callable, List

import numpy as np
import torch

from engine import Engine, SamplingParams
from engine.model_setup import ModelSource
from engine.models.demo_vl import SPECIAL_TOKENS, demo_tokenizer
from engine.multimodal import image_token_count

from .common import print_table, sync, write_result

QUESTION = "Describe this image in detail."


def model_config(tokenizer, tiny: bool):
    from transformers import Qwen2VLConfig

    ids = {name: tokenizer.convert_tokens_to_ids(name) for name in SPECIAL_TOKENS}
    if tiny:
        text = dict(vocab_size=len(tokenizer), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32768,
                    rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [4, 6, 6]})
        vision = dict(depth=2, embed_dim=64, hidden_size=128, num_heads=4, mlp_ratio=2)
    else:               # Qwen2-VL-7B's shapes
        text = dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                    num_attention_heads=28, num_key_value_heads=4, max_position_embeddings=32768,
                    rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]})
        vision = dict(depth=32, embed_dim=1280, hidden_size=3584, num_heads=16, mlp_ratio=4)
    text.update(rms_norm_eps=1e-6, bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"])
    return Qwen2VLConfig(text_config=text, vision_config=vision, image_token_id=ids["<|image_pad|>"],
                         video_token_id=ids["<|video_pad|>"], vision_start_token_id=ids["<|vision_start|>"],
                         vision_end_token_id=ids["<|vision_end|>"])


def timed(fn: Callable[[], object], device: torch.device, repeats: int, warmup: int = 1) -> List[float]:
    """Seconds of `repeats` calls after `warmup` calls, device-synchronized."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        sync(str(device))
        start = time.perf_counter()
        fn()
        sync(str(device))
        times.append(time.perf_counter() - start)
    return times


def reference_model(config, device, dtype):
    from transformers import Qwen2VLForConditionalGeneration
    with torch.device(device):
        return Qwen2VLForConditionalGeneration._from_config(config, dtype=dtype).eval()


def engine_with_weights_of(reference, tokenizer, **config):
    """Our engine on the reference's tensors, from memory (no 16 GB checkpoint on disk)."""
    source = ModelSource(reference.config, iter(reference.state_dict().items()), tokenizer)
    return Engine(model_source=source, model="in-memory Qwen2-VL", **config)


def test_image(size: int, seed: int):
    from PIL import Image
    return Image.fromarray(np.random.RandomState(seed).randint(0, 255, (size, size, 3), dtype=np.uint8))


def ask(image):
    return [{"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": QUESTION}]}]


def peak_extra_bytes(device, fn) -> int:
    """Peak device memory fn allocates above what was resident before it (CUDA only)."""
    if device.type != "cuda":
        fn()
        return 0
    sync(str(device))
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    fn()
    sync(str(device))
    return torch.cuda.max_memory_allocated(device) - base


def reference_inputs(engine, reference, image, device) -> dict:
    """transformers' inputs for the same prompt and pixels as ours."""
    _, token_ids = engine.tokenize(ask(image))
    batch = engine.vision.builder.processor(images=[image], return_tensors="pt")
    ids = torch.tensor([token_ids], device=device)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
              "pixel_values": batch["pixel_values"].to(device), "image_grid_thw": batch["image_grid_thw"].to(device)}
    if "mm_token_type_ids" in inspect.signature(reference.forward).parameters:   # newer transformers
        inputs["mm_token_type_ids"] = (ids == engine.hf_config.image_token_id).int()
    return inputs


@torch.inference_mode()
def measure(engine, reference, device, args, seed0: int) -> dict:
    """Ours and transformers' figures, measured alternately (side by side in one run)."""
    once = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True)
    images = [test_image(args.image_size, seed0 + i) for i in range(args.repeats + 1)]
    builder, model = engine.vision.builder, engine.runner.model
    data, _ = builder.preprocess(images[0], 0)
    preprocess = timed(lambda: builder.preprocess(images[0], 0), device, args.repeats, 0)
    pixels = data.pixel_values.to(device)
    inputs = reference_inputs(engine, reference, images[0], device)
    ours_encode = lambda: model.encode_image(pixels, data.grid_thw)                        # noqa: E731
    hf_encode = lambda: reference.model.get_image_features(inputs["pixel_values"],        # noqa: E731
                                                          inputs["image_grid_thw"])
    hf_prefill = lambda: reference(**inputs, logits_to_keep=1)                            # noqa: E731
    for warm_up in (ours_encode, hf_encode, hf_prefill, lambda: engine.chat(ask(images[0]), once)):
        warm_up()                                                  # kernels, allocator caches
    encode, hf_encode_s, cold, hf_prefill_s, peaks = [], [], [], [], []
    for image in images[1:]:                                       # a new image each time: cold
        encode += timed(ours_encode, device, 1, 0)
        hf_encode_s += timed(hf_encode, device, 1, 0)
        outs = []
        peaks.append(peak_extra_bytes(device, lambda: outs.append(engine.chat(ask(image), once)[0])))
        cold.append(outs[0].metrics.ttft)
        hf_prefill_s += timed(hf_prefill, device, 1, 0)
    hf_peak = peak_extra_bytes(device, hf_prefill)
    warm = engine.chat(ask(images[-1]), once)[0]
    stats, prompt_tokens = engine.stats(), len(warm.prompt_token_ids)
    kv_per_token = engine.memory["kv_cache_bytes"] // (stats["kv_blocks_total"] * stats["kv_block_size"])
    row_bytes = engine.memory["vision_cache_bytes"] // stats["vision_cache_tokens_total"]
    blocks = -(-(prompt_tokens + 1) // stats["kv_block_size"])
    ours = {
        "grid_thw": list(data.grid_thw),
        "image_tokens": image_token_count(data.grid_thw, builder.merge_size),
        "prompt_tokens": prompt_tokens,
        "preprocess_s": statistics.median(preprocess),
        "encode_s": statistics.median(encode),
        "ttft_cold_s": statistics.median(cold),
        "ttft_warm_s": warm.metrics.ttft,
        "warm_cached_tokens": warm.num_cached_tokens,
        "peak_temporaries_bytes": max(peaks),
        "vision_pool_bytes": engine.memory["vision_cache_bytes"],
        "vision_pool_peak_used_bytes": stats["vision_cache_tokens_peak"] * row_bytes,
        "kv_pool_bytes": engine.memory["kv_cache_bytes"],
        "kv_used_by_request_bytes": blocks * stats["kv_block_size"] * kv_per_token,
        "max_num_batched_tokens": engine.config.max_num_batched_tokens,
    }
    theirs = {"encode_s": statistics.median(hf_encode_s), "encode_prefill_s": statistics.median(hf_prefill_s),
              "peak_temporaries_bytes": hf_peak}
    return {"ours": ours, "transformers": theirs}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tiny", action="store_true", help="tiny config (fast; for checking on CPU)")
    parser.add_argument("--max-pixels", default=str(28 * 28 * 1280),
                        help="comma-separated resize bounds to measure, e.g. 1003520,12845056")
    parser.add_argument("--image-size", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-num-batched-tokens", type=int, default=8192)
    parser.add_argument("--kv-cache-gib", type=float, default=None, help="default: 8 (GPU), 0.25 (CPU)")
    parser.add_argument("--out-dir", default=None, help="default: bench/results")
    args = parser.parse_args(argv)

    device = torch.device(args.device)
    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    kv_bytes = int((args.kv_cache_gib or (8 if device.type == "cuda" else 0.25)) * 2 ** 30)
    tokenizer = demo_tokenizer()
    config = model_config(tokenizer, args.tiny)
    torch.manual_seed(0)
    reference = reference_model(config, device, dtype)
    runs = []
    for n, max_pixels in enumerate(int(v) for v in args.max_pixels.split(",")):
        engine = engine_with_weights_of(reference, tokenizer, device=str(device), dtype=str(dtype),
                                        max_pixels=max_pixels, kv_cache_memory=kv_bytes,
                                        max_num_batched_tokens=args.max_num_batched_tokens)
        try:
            result = measure(engine, reference, device, args, seed0=100 * n)
        finally:
            engine.shutdown()
        ours, theirs = result["ours"], result["transformers"]
        runs.append({"max_pixels": max_pixels, **result,
                     "encode_speedup": theirs["encode_s"] / ours["encode_s"],
                     "encode_prefill_speedup": theirs["encode_prefill_s"] / ours["ttft_cold_s"]})
        del engine
        if device.type == "cuda":
            torch.cuda.empty_cache()

    payload = {"model": "Qwen2-VL tiny" if args.tiny else "Qwen2-VL-7B-shaped",
               "dtype": str(dtype).replace("torch.", ""), "image": f"{args.image_size}x{args.image_size} RGB noise",
               "repeats": args.repeats, "runs": runs,
               "notes": "TTFT = submit (after host preprocessing) to first token, through the engine loop; "
                        "transformers = one forward with logits_to_keep=1. Ours and transformers are "
                        "measured alternately; medians over repeats."}
    mib = 2 ** 20
    table = [{"max_pixels": r["max_pixels"], "grid": "x".join(map(str, r["ours"]["grid_thw"])),
              "image tokens": r["ours"]["image_tokens"], "ours encode s": r["ours"]["encode_s"],
              "HF encode s": r["transformers"]["encode_s"], "ours TTFT cold s": r["ours"]["ttft_cold_s"],
              "HF encode+prefill s": r["transformers"]["encode_prefill_s"],
              "ours TTFT warm s": r["ours"]["ttft_warm_s"],
              "vision pool MiB (used)": f"{r['ours']['vision_pool_bytes'] / mib:.1f} "
                                        f"({r['ours']['vision_pool_peak_used_bytes'] / mib:.1f})",
              "KV pool MiB (used)": f"{r['ours']['kv_pool_bytes'] / mib:.0f} "
                                    f"({r['ours']['kv_used_by_request_bytes'] / mib:.1f})",
              "peak temporaries MiB ours/HF": f"{r['ours']['peak_temporaries_bytes'] / mib:.0f}/"
                                              f"{r['transformers']['peak_temporaries_bytes'] / mib:.0f}"}
             for r in runs]
    print_table(table, list(table[0]))
    write_result("vision", str(device), payload, args.out_dir)


if __name__ == "__main__":
    main()
