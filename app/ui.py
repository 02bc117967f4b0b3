"""The Blocks layout and its event wiring. Logic lives in handlers.py / chat.py."""
from __future__ import annotations

from pathlib import Path
from typing import List

import gradio as gr

from . import charts
from .chat import ChatService
from .conversation import Conversation
from .handlers import Handlers
from .metrics import MetricsHistory
from .options import AppOptions
from .render_panel import accuracy_table, precheck_html, request_card, status_line

ASSETS = Path(__file__).resolve().parent.parent / "assets"
CSS_PATH = Path(__file__).resolve().parent / "style.css"
EXAMPLES = [  # (file in assets/, question, label)
    ("sample_report.pdf", "How many turbines did the company operate at the end of 2024?",
     "PDF · 11-page annual report"),
    ("sample_repo.tar.gz", "What does this project do, and which file parses the ledger?",
     "Code · repository archive (.tar.gz)"),
    ("sample_image.png", "What is in this picture?", "Image · 4K picture (3840×2160)"),
]
PLACEHOLDER = ("Ask about a document: drop a PDF, source files, a .zip/.tar.gz of a repository "
               "or an image here")


def example_rows() -> tuple:
    rows, labels = [], []
    for name, question, label in EXAMPLES:
        if (ASSETS / name).is_file():
            rows.append([{"text": question, "files": [str(ASSETS / name)]}])
            labels.append(label)
    return rows, labels


def header_html(engine, options: AppOptions) -> str:
    stats = engine.stats()
    kv_gib = stats["memory"].get("kv_cache_bytes", 0) / 1024 ** 3
    chips = [engine.model_name, f"{stats['device']} · {stats['dtype']}",
             f"{engine.max_model_len:,}-token context", f"KV pool {kv_gib:.2f} GiB",
             "vision ✓" if engine.supports_images else "text only (no vision tower)"]
    chips_html = "".join(f"<span class='lr-chip'>{c}</span>" for c in chips)
    return ("<div class='lr-header'><div><span class='lr-logo'>Longread</span>"
            "<span class='lr-tagline'>Ask about long documents, and see what the wait is made "
            f"of.</span></div><div class='lr-chips'>{chips_html}</div></div>")


def build_ui(service: ChatService, history: MetricsHistory, options: AppOptions) -> gr.Blocks:
    handlers = Handlers(service, history)
    engine = service.engine
    with gr.Blocks(title="Longread", analytics_enabled=False, fill_width=True) as demo:
        conversation = gr.State(Conversation())
        seen_version = gr.State(None)
        with gr.Row(elem_classes="lr-top"):
            gr.HTML(header_html(engine, options), js_on_load=None)
        status = gr.HTML(status_line(history.latest_sample()), js_on_load=None,
                         elem_id="lr-status-box")
        with gr.Row(equal_height=False):
            with gr.Column(scale=5, min_width=420):
                chatbot = gr.Chatbot(elem_id="lr-chat", height=520, show_label=False,
                                     buttons=["copy"], feedback_options=None,
                                     placeholder="**Longread** reads the whole document first "
                                                 "(prefill), then streams the answer.")
                textbox = gr.MultimodalTextbox(
                    elem_id="lr-input", file_count="multiple", sources=["upload"],
                    placeholder=PLACEHOLDER, show_label=False, submit_btn=True, stop_btn=False,
                    autofocus=True, max_plain_text_length=100_000)
                precheck = gr.HTML(precheck_html(None), js_on_load=None, elem_id="lr-precheck-box")
                truncate = gr.Checkbox(label="Truncate documents to fit (cuts the attached "
                                             "documents; the model will not see the cut part)",
                                       value=False, visible=False, elem_id="lr-truncate")
                with gr.Row():
                    new_chat = gr.Button("+ New chat", size="sm", variant="secondary",
                                         elem_id="lr-new-chat", scale=0)
                    with gr.Accordion("Answer settings", open=False, elem_id="lr-settings"):
                        default = options.default_max_new_tokens
                        max_tokens = gr.Slider(min(16, default), max(2048, default), value=default,
                                               step=16, label="Max answer tokens",
                                               elem_id="lr-max-tokens")
                        temperature = gr.Slider(0.0, 1.5, value=0.0, step=0.05,
                                                label="Temperature (0 = deterministic)")
                rows, labels = example_rows()
                if rows:
                    gr.Examples(rows, inputs=[textbox], example_labels=labels,
                                label="Try an example (fills the box; check the forecast, then send)")
            with gr.Column(scale=4, min_width=360):
                card = gr.HTML(request_card(None, None), js_on_load=None, elem_id="lr-card-box")
                mem_plot = gr.BarPlot(None, x="device", y="GiB", color="part",
                                      title="Memory per device", color_map=charts.MEMORY_COLORS,
                                      height=220, elem_id="lr-mem-plot", x_title="")
                accuracy = gr.HTML(accuracy_table([]), js_on_load=None, elem_id="lr-accuracy-box")
        with gr.Row(equal_height=True):
            ttft_plot = gr.ScatterPlot(None, x="request", y="TTFT (s)",
                                       color="kind", color_map=charts.TTFT_COLORS,
                                       title="TTFT per request: cold, warm and the forecast",
                                       height=240, elem_id="lr-ttft-plot")
            kv_plot = gr.LinePlot(None, x="time", y="percent", color="series",
                                  color_map=charts.KV_COLORS, y_lim=[0, 100],
                                  title="KV pool use and prefix-cache hit rate", height=240,
                                  elem_id="lr-kv-plot", x_title="")
            host_plot = gr.LinePlot(None, x="time", y="GiB", color="series",
                                    color_map=charts.HOST_COLORS, title="Host RAM", height=240,
                                    elem_id="lr-host-plot", x_title="")
        timer = gr.Timer(1.0)

        # Pre-send check: live, on every edit of the message or of the knobs it depends on.
        gr.on([textbox.change, truncate.change, max_tokens.release], handlers.preview,
              [textbox, conversation, truncate, max_tokens], [precheck, truncate],
              trigger_mode="always_last", show_progress="hidden", api_visibility="private",
              concurrency_limit=4)
        accepted = textbox.submit(handlers.accept,
                                  [textbox, conversation, truncate, max_tokens, temperature],
                                  [textbox, chatbot, precheck, truncate], show_progress="hidden",
                                  api_visibility="private", concurrency_limit=4)
        answering = accepted.then(handlers.respond, [conversation], [chatbot, card, textbox],
                                  show_progress="hidden", api_visibility="private",
                                  concurrency_limit=None)
        answering.then(lambda: gr.MultimodalTextbox(submit_btn=True, stop_btn=False), None,
                       [textbox], show_progress="hidden", api_visibility="private", queue=False)
        textbox.stop(handlers.stop, [conversation], [chatbot, card, textbox], cancels=[answering],
                     show_progress="hidden", api_visibility="private", queue=False)
        # A new chat keeps the unsent draft and re-checks it against the now empty conversation.
        new_chat.click(handlers.new_chat, [conversation], [chatbot, textbox],
                       cancels=[answering], show_progress="hidden", api_name="new_chat",
                       queue=False).then(
            handlers.preview, [textbox, conversation, truncate, max_tokens], [precheck, truncate],
            show_progress="hidden", api_visibility="private")
        timer.tick(handlers.tick, [seen_version],
                   [status, mem_plot, host_plot, kv_plot, ttft_plot, accuracy, seen_version],
                   show_progress="hidden", api_visibility="private", queue=False)

        # API: /ask streams (answer, report) for a message with files; /stats reads the panel data.
        with gr.Row(visible=False):
            api_message = gr.MultimodalTextbox(file_count="multiple")
            api_answer, api_report = gr.Textbox(), gr.JSON()
            api_button = gr.Button()
        api_button.click(handlers.ask, [api_message, truncate, max_tokens, temperature, conversation],
                         [api_answer, api_report], api_name="ask", concurrency_limit=None)
        gr.api(handlers.stats, api_name="stats")
    return demo


def allowed_paths() -> List[str]:
    return [str(ASSETS)] if ASSETS.is_dir() else []


def load_css() -> str:
    return CSS_PATH.read_text() if CSS_PATH.is_file() else ""
