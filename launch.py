"""Start Longread. (Until the Gradio app lands this is a terminal chat with the engine.)"""
import argparse
import sys

from engine import Engine, EngineConfig, SamplingParams


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Longread: ask an LLM about a long document")
    parser.add_argument("--model", default=None, help="HF directory, HF cache id or .gguf (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--max-tokens", type=int, default=512)
    args = parser.parse_args(argv)
    engine = Engine(EngineConfig(model=args.model, device=args.device))
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
        answer = ""
        for out in engine.stream(history, SamplingParams(max_tokens=args.max_tokens, temperature=0)):
            text = out.outputs[0].text
            print(text[len(answer):], end="", flush=True)
            answer = text
        print(f"\n[TTFT {out.metrics.ttft:.2f}s, {out.metrics.num_cached_tokens} cached tokens]")
        history.append({"role": "assistant", "content": answer})
    engine.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
