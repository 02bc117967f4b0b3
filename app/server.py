"""Start-up: engine (with visible progress), forecast calibration, sampler, UI, launch.

Launch policy: --share without --auth warns that anyone with the link can use the app and see
uploads; a share link that cannot be created (no internet) leaves the app running locally and
says why.
"""
from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass
from typing import Optional

import gradio as gr

from engine import Engine, EngineConfig

from app.attachments import AttachmentLimits

from .chat import ChatService
from .documents import DocumentLoader
from .forecast import PrefillModel, calibrate
from .metrics import MetricsHistory
from .options import CPU_STEP_TOKENS, AppOptions
from .sampler import Sampler
from .ui import allowed_paths, build_ui, load_css

log = logging.getLogger("longread")
SHARE_WARNING = ("WARNING: --share without --auth: anyone who gets the public link can use this "
                 "app, run the model on your machine and see what is uploaded. Add --auth "
                 "user:password (or set LONGREAD_AUTH) to require a login.")


def setup_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    for noisy in ("httpx", "httpcore", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


@contextlib.contextmanager
def heartbeat(what: str, every_s: float = 5.0):
    """Log "still <what>… N s" while the block runs, so a long start never looks hung."""
    done = threading.Event()
    start = time.monotonic()

    def beat():
        while not done.wait(every_s):
            log.info("still %s… %.0f s", what, time.monotonic() - start)

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        log.info("%s: done in %.1f s", what, time.monotonic() - start)


def step_tokens(options: AppOptions) -> Optional[int]:
    """The engine's per-step token budget: None leaves the GPU default to the engine."""
    if options.step_tokens:
        return options.step_tokens
    return CPU_STEP_TOKENS if options.device == "cpu" or not _cuda_available() else None


def _cuda_available() -> bool:
    import torch
    return torch.cuda.is_available()


def start_engine(options: AppOptions) -> Engine:
    name = options.model or "the default model (SmolLM2-135M-Instruct)"
    log.info("loading %s on %s; the first start converts the GGUF once (about 20 s)",
             name, options.device)
    config = EngineConfig(model=options.model, device=options.device,
                          max_num_batched_tokens=step_tokens(options))
    with heartbeat("loading the model"):
        engine = Engine(config)
    stats = engine.stats()
    log.info("engine ready: %s on %s (%s), context %d tokens, KV pool %d blocks",
             engine.model_name, stats["device"], stats["dtype"], engine.max_model_len,
             stats["kv_blocks_total"])
    return engine


@dataclass
class App:
    engine: Engine
    demo: gr.Blocks
    service: ChatService
    history: MetricsHistory
    sampler: Sampler

    def close(self) -> None:
        self.sampler.stop()
        with contextlib.suppress(Exception):
            self.demo.close()
        self.engine.shutdown()


def build_app(engine: Engine, options: AppOptions) -> App:
    model = PrefillModel()
    if options.calibrate:
        with heartbeat("calibrating the TTFT forecast"):
            calibrate(engine, model)
    history = MetricsHistory()
    limits = AttachmentLimits(max_file_bytes=options.max_file_bytes)
    service = ChatService(engine, history, model, DocumentLoader(limits, engine.count_tokens))
    sampler = Sampler(engine, history).start()
    return App(engine, build_ui(service, history, options), service, history, sampler)


def theme() -> gr.themes.Base:
    # Local font stacks only: the app must not fetch web fonts (it may run offline).
    return gr.themes.Soft(primary_hue="indigo", neutral_hue="slate",
                          font=["ui-sans-serif", "system-ui", "Segoe UI", "sans-serif"],
                          font_mono=["ui-monospace", "SFMono-Regular", "monospace"])


def launch(app: App, options: AppOptions) -> None:
    if options.share and not options.auth:
        log.warning(SHARE_WARNING)
    app.demo.queue(default_concurrency_limit=4)
    app.demo.launch(
        server_name=options.host, server_port=options.port, share=options.share,
        auth=options.auth or None, auth_message="Longread: log in to continue.",
        max_file_size=options.max_file_bytes, allowed_paths=allowed_paths(),
        theme=theme(), css=load_css(), prevent_thread_lock=True, show_error=True,
        footer_links=["api"], quiet=True)
    log.info("Longread is running at %s", app.demo.local_url)
    if options.share:
        if app.demo.share_url:
            log.info("public link: %s", app.demo.share_url)
        else:
            log.warning("could not create a share link (no internet access to Gradio's share "
                        "server?); Longread is running locally only, at %s", app.demo.local_url)


def serve(options: AppOptions) -> int:
    setup_logging()
    engine = start_engine(options)
    app = None
    try:
        app = build_app(engine, options)
        launch(app, options)
        app.demo.block_thread()
    finally:
        log.info("shutting down")
        if app is not None:
            app.close()
        else:
            engine.shutdown()
    return 0
