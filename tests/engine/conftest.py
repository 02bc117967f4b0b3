import pytest

from .tiny_models import load_reference, save_tiny_model


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory):
    """One random tiny model per family, saved once per test session."""
    root = tmp_path_factory.mktemp("tiny")
    return {family: save_tiny_model(root / family, family, seed=i)
            for i, family in enumerate(["llama", "qwen2", "qwen3"])}


@pytest.fixture(scope="session")
def references(tiny_dirs):
    return {family: load_reference(path) for family, path in tiny_dirs.items()}


@pytest.fixture(scope="session")
def llama_dir(tiny_dirs):
    return tiny_dirs["llama"]


@pytest.fixture(scope="session")
def vl_dirs(tmp_path_factory):
    """Tiny random Qwen2-VL and Qwen2.5-VL models, saved once per test session."""
    from .vision_models import save_tiny_vl_model
    root = tmp_path_factory.mktemp("tiny-vl")
    return {kind: save_tiny_vl_model(root / kind, kind, seed=i)
            for i, kind in enumerate(["qwen2_vl", "qwen2_5_vl"])}


@pytest.fixture(scope="session")
def vl_references(vl_dirs):
    from .vision_models import load_vl_reference
    return {kind: load_vl_reference(path) for kind, path in vl_dirs.items()}
