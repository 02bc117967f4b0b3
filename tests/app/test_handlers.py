"""Gradio handlers: refusals leave the user's message alone; the refresh tick feeds the charts."""
import gradio as gr

from app.attachments import AttachmentLimits
from app.chat import ChatService
from app.conversation import Conversation
from app.documents import DocumentLoader
from app.forecast import PrefillModel
from app.handlers import Handlers
from app.metrics import MetricsHistory
from tests.app.test_metrics_charts import record, sample


def handlers_for(engine, history=None):
    history = history or MetricsHistory()
    loader = DocumentLoader(AttachmentLimits(max_file_bytes=1 << 20), engine.count_tokens)
    return Handlers(ChatService(engine, history, PrefillModel(), loader), history)


def is_skip(update):
    return update == gr.skip()


def test_respond_with_nothing_accepted_touches_no_output(word_engine):
    # A generator that yields nothing would make Gradio set the textbox (and chat) to None.
    outputs = list(handlers_for(word_engine).respond(Conversation()))
    assert len(outputs) == 1 and all(is_skip(o) for o in outputs[0])


def test_refused_message_stays_in_the_box(word_engine):
    conv = Conversation()
    textbox, chat, precheck, truncate = handlers_for(word_engine).accept(
        {"text": "word " * 500, "files": []}, conv, False, 50, 0.0)
    assert is_skip(textbox) and is_skip(chat) and "too many" in precheck
    assert "Shorten the message" in precheck
    assert conv.turns == [] and conv.pending is None


def test_tick_feeds_every_chart(word_engine):
    history = MetricsHistory()
    for t in range(3):
        history.add_sample(sample(1000.0 + t, queries=10, hits=5))
    history.add_record(record(1, 20.0, forecast=18.0))
    status, mem, host, kv, ttft, accuracy, version = handlers_for(word_engine, history).tick(None)
    assert "engine idle" in status and version == 1
    assert len(mem) and len(host) == 6 and len(kv) == 9
    assert "#1" in accuracy and ttft.value is not None
    again = handlers_for(word_engine, history).tick(version)
    assert is_skip(again[5])                                 # table unchanged: not re-sent
