"""Command line: `python launch.py [flags]` (see README, "The app")."""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional, Tuple

from .auth import AUTH_ENV, AuthError, collect_auth
from .devices import DeviceError, choose_engine_device
from .options import DEFAULT_MAX_FILE_MB, DEFAULT_MAX_NEW_TOKENS, AppOptions


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="launch.py",
                                description="Longread: ask an LLM about a long document")
    p.add_argument("--model", default=None,
                   help="HF model directory, HF cache id or .gguf file (default: the embedded "
                        "SmolLM2-135M-Instruct)")
    p.add_argument("--devices", "--device", dest="devices", default="auto",
                   help="auto, cpu, cuda, cuda:0 or cuda:0,1 (several devices: context parallel "
                        "is not available yet, the first one is used)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0 = all)")
    p.add_argument("--port", type=int, default=7860)
    p.add_argument("--share", action="store_true", help="also create a public Gradio link")
    p.add_argument("--auth", action="append", metavar="USER:PASSWORD",
                   help=f"require a login (repeatable; or set {AUTH_ENV}=user:password)")
    p.add_argument("--max-file-mb", type=float, default=DEFAULT_MAX_FILE_MB,
                   help="largest upload accepted, in MB (default %(default)s)")
    p.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_NEW_TOKENS,
                   help="default answer length in tokens (adjustable in the UI)")
    p.add_argument("--no-calibrate", action="store_true",
                   help="skip the few-second prefill calibration of the TTFT forecast")
    p.add_argument("--cli", action="store_true", help="terminal chat instead of the web app")
    return p


def parse_options(argv: Optional[List[str]] = None, environ=None) -> Tuple[AppOptions, bool]:
    """(options, whether --cli was given). Exits with a usage message on bad flags."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        auth = collect_auth(args.auth, environ)
        choice = choose_engine_device(args.devices)
    except (AuthError, DeviceError) as exc:
        parser.error(str(exc))
    if choice.message:
        print(f"note: {choice.message}", file=sys.stderr)
    if args.max_file_mb <= 0:
        parser.error("--max-file-mb must be positive")
    if args.max_tokens < 1:
        parser.error("--max-tokens must be at least 1")
    if not 0 < args.port < 65536:
        parser.error("--port must be between 1 and 65535")
    return AppOptions(model=args.model, device=choice.device, requested_devices=choice.requested,
                      host=args.host, port=args.port, share=args.share, auth=auth,
                      max_file_mb=args.max_file_mb, calibrate=not args.no_calibrate,
                      default_max_new_tokens=args.max_tokens), args.cli


def main(argv: Optional[List[str]] = None) -> int:
    options, terminal = parse_options(argv)
    if terminal:
        from engine import Engine, EngineConfig
        from .terminal import run_terminal_chat
        with Engine(EngineConfig(model=options.model, device=options.device)) as engine:
            return run_terminal_chat(engine, options.default_max_new_tokens)
    from .server import serve
    try:
        return serve(options)
    except OSError as exc:            # e.g. the port is taken
        print(f"error: could not start the web server on {options.host}:{options.port}: {exc}",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
