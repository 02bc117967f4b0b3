"""`python launch.py --cli`: a plain terminal chat with the engine (no browser)."""
from __future__ import annotations

from engine import SamplingParams


def run_terminal_chat(engine, max_tokens: int = 512) -> int:
    history = []
    print(f"{engine.model_name} on {engine.device}. Empty line to quit.")
    while True:
        try:
            line = input("> ").strip()
        except EOFError:
            break
        if not line:
            break
        history.append({"role": "user", "content": line})
        answer, out = "", None
        for out in engine.stream(history, SamplingParams(max_tokens=max_tokens, temperature=0)):
            text = out.outputs[0].text
            print(text[len(answer):], end="", flush=True)
            answer = text
        ttft = out.metrics.ttft if out else None
        print(f"\n[TTFT {ttft or 0:.2f}s, {out.num_cached_tokens if out else 0} cached tokens]")
        history.append({"role": "assistant", "content": answer})
    return 0
