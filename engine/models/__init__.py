"""Model families by HF model_type."""
from .llama import LlamaForCausalLM
from .qwen2_vl import Qwen2VLForConditionalGeneration

_FAMILIES = {t: cls for cls in (LlamaForCausalLM, Qwen2VLForConditionalGeneration) for t in cls.model_types}


def model_class(hf_config):
    model_type = getattr(hf_config, "model_type", None)
    if model_type not in _FAMILIES:
        raise ValueError(f"unsupported model architecture {model_type!r} "
                         f"(architectures={getattr(hf_config, 'architectures', None)}); "
                         f"Longread supports: {', '.join(sorted(_FAMILIES))}")
    return _FAMILIES[model_type]

