"""`demo-vl`: the generated random-weight vision model the app lists (answers meaningless)."""
import hashlib

from engine import SamplingParams
from engine.models.demo_vl import make_demo_model

from .vision_models import cpu_engine, random_image


def weights_digest(path):
    return hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()


def test_demo_model_is_deterministic(tmp_path):
    a, b = make_demo_model(tmp_path / "a", seed=0), make_demo_model(tmp_path / "b", seed=0)
    assert weights_digest(a) == weights_digest(b)
    assert (a / "preprocessor_config.json").is_file() and (a / "tokenizer.json").is_file()


def test_demo_vl_reads_a_4k_image(tmp_path, monkeypatch):
    monkeypatch.setenv("LONGREAD_CACHE", str(tmp_path))
    with cpu_engine("demo-vl") as engine:
        assert engine.supports_images and engine.model_name == "demo-vl"
        image = random_image(4096, 4096, seed=1)
        out = engine.chat([{"role": "user", "content": [{"type": "image", "image": image},
                                                        {"type": "text", "text": "Describe the image."}]}],
                          SamplingParams(max_tokens=5, temperature=0.0, ignore_eos=True))[0]
        assert out.error is None and len(out.outputs[0].token_ids) == 5
        stats = engine.stats()
        # Qwen2-VL's default max_pixels: a 4K image becomes 1280 merged patches + 2 separators.
        assert stats["max_image_tokens"] == 1282 and stats["num_images_encoded"] == 1
        assert stats["vision_cache_tokens_free"] == stats["vision_cache_tokens_total"]
