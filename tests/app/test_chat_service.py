"""ChatService with the real default model: progress during prefill, warm follow-ups on the
same document (prefix cache), and aborting however a request ends early."""
import threading
import time

import pytest

from app.attachments import AttachmentLimits
from app.chat import ChatService
from app.conversation import Conversation
from app.documents import DocumentLoader
from app.forecast import PrefillModel, calibrate
from app.metrics import MetricsHistory
from app.plan import Settings
from tests.app.conftest import ASSETS

STORY = ("The lighthouse keeper of Varden kept a logbook. Every evening she wrote down the "
         "weather, the ships that passed and the colour of the sea. ") * 40


@pytest.fixture
def service(default_engine):
    loader = DocumentLoader(AttachmentLimits(max_file_bytes=50 << 20), default_engine.count_tokens)
    return ChatService(default_engine, MetricsHistory(), PrefillModel(), loader)


def wait_idle(engine, timeout_s=20.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        stats = engine.stats()
        if stats["num_running"] == 0 and stats["num_waiting"] == 0 and \
                stats["kv_blocks_free"] == stats["kv_blocks_total"]:
            return stats
        time.sleep(0.1)
    raise AssertionError(f"engine still busy: {engine.stats()}")


def test_prefill_progress_then_a_warm_follow_up(service, default_engine, tmp_path):
    doc = tmp_path / "logbook.txt"
    doc.write_text(STORY + f" Run {time.time()}.")          # unique: never cached before
    conv, settings = Conversation(), Settings(max_new_tokens=8)
    first = service.accept(conv, {"text": "Who kept the logbook?", "files": [str(doc)]}, settings)
    assert first.sendable and first.num_tokens > 600 and first.forecast.cached_tokens < 32
    views = list(service.respond(conv))
    reading = [v for v in views if v.phase == "reading" and 0 < v.progress < 1]
    assert reading, "no progress was reported during the prefill"
    assert all(v.eta is not None for v in reading)
    assert [v.progress for v in reading] == sorted(v.progress for v in reading)
    final = views[-1]
    assert final.phase == "done" and final.record.ttft > 0 and final.record.cache_state == "cold"
    assert conv.turns[0].answer and conv.turns[0].status == "done"

    second = service.accept(conv, {"text": "What did she write down?", "files": []}, settings)
    # Byte-identical prefix: the follow-up's tokens start with the whole first prompt.
    assert second.token_ids[:first.num_tokens] == first.token_ids
    assert second.forecast.cached_tokens >= first.num_tokens - 16
    assert second.forecast.expected_seconds < second.forecast.cold_seconds / 3
    final2 = list(service.respond(conv))[-1]
    assert final2.record.cache_state == "warm"
    assert final2.record.cached_tokens >= first.num_tokens - 16
    assert final2.record.forecast_ttft == second.forecast.expected_seconds
    assert [r.index for r in service.history.records()] == [final.record.index, final2.record.index]
    assert service.model.num_samples == 2
    wait_idle(default_engine)


def test_closing_the_stream_mid_prefill_aborts_in_the_engine(service, default_engine):
    conv = Conversation()
    plan = service.accept(conv, {"text": f"Summarize. {time.time()}",
                                 "files": [str(ASSETS / "sample_report.pdf")]}, Settings(max_new_tokens=8))
    assert plan.sendable
    stream = service.respond(conv)
    for view in stream:
        if view.phase == "reading" and view.progress > 0:
            break
    assert default_engine.stats()["num_running"] == 1
    stream.close()                                          # what a cancelled Gradio event does
    wait_idle(default_engine)
    assert conv.turns[-1].status == "stopped" and conv.active_request_id is None


def test_stop_button_aborts_and_the_stream_ends_stopped(service, default_engine):
    conv = Conversation()
    plan = service.accept(conv, {"text": f"Summarize. {time.time()}",
                                 "files": [str(ASSETS / "sample_report.pdf")]}, Settings(max_new_tokens=8))
    assert plan.sendable
    views, started = [], threading.Event()

    def consume():
        for view in service.respond(conv):
            views.append(view)
            if view.phase == "reading":
                started.set()

    worker = threading.Thread(target=consume)
    worker.start()
    assert started.wait(60)
    service.stop(conv)
    worker.join(30)
    assert not worker.is_alive()
    assert views[-1].phase == "stopped" and views[-1].record.finish_reason == "abort"
    assert views[-1].record.ttft is None                   # stopped before the first token
    wait_idle(default_engine)


def test_stop_is_final_even_when_progress_reports_are_still_in_flight(service, default_engine):
    """Stop (handlers.stop marks the turn at once) can land between two progress reports of
    the answer's stream: the reports after it must not bring the turn back to "reading"."""
    from app.render_chat import chat_messages
    conv = Conversation()
    plan = service.accept(conv, {"text": f"Summarize. {time.time()}",
                                 "files": [str(ASSETS / "sample_report.pdf")]}, Settings(max_new_tokens=8))
    turn = plan.turn
    after_stop = []
    for view in service.respond(conv):
        if after_stop or view.phase == "reading":
            if not after_stop:
                turn.status = "stopped"                     # what the Stop handler does first
            after_stop.append((view.phase, turn.status))
            assert "Stopped" in chat_messages(conv, turn, view)[-1]["content"]
            if len(after_stop) == 3:                        # two reports later the abort lands
                service.stop(conv)
    assert len(after_stop) > 3
    assert all(phase == "stopped" and status == "stopped" for phase, status in after_stop[1:])
    assert turn.status == "stopped"
    wait_idle(default_engine)


def test_busy_conversation_refuses_a_second_message(service):
    conv = Conversation()
    assert service.accept(conv, {"text": "Hello", "files": []}, Settings(max_new_tokens=4)).sendable
    refused = service.accept(conv, {"text": "Hello again", "files": []}, Settings())
    assert not refused.sendable and "still being written" in refused.blocking_reason()
    list(service.respond(conv))
    assert not conv.busy


def test_calibration_seeds_the_forecast(default_engine):
    model = PrefillModel()
    calibrate(default_engine, model, sizes=(64, 128))
    assert model.num_samples == 2
    assert model.forecast(128, 0).cold_seconds > 0


def test_images_reach_a_vision_model_and_follow_ups_stay_warm():
    """With a vision model (the generated random-weight demo-vl) the image itself is sent, its
    tokens are counted before sending, and the follow-up reuses the image's KV."""
    from engine import Engine, EngineConfig
    with Engine(EngineConfig(model="demo-vl", max_num_batched_tokens=512)) as engine:
        loader = DocumentLoader(AttachmentLimits(max_file_bytes=50 << 20), engine.count_tokens)
        service = ChatService(engine, MetricsHistory(), PrefillModel(), loader)
        conv = Conversation()
        plan = service.accept(conv, {"text": "What is in this picture?",
                                     "files": [str(ASSETS / "sample_image.png")]}, Settings(max_new_tokens=4))
        assert plan.sendable and plan.num_tokens > 500             # the image's own tokens
        first = list(service.respond(conv))[-1]
        assert first.phase == "done" and first.record.prompt_tokens == plan.num_tokens
        follow = service.accept(conv, {"text": "And the colours?", "files": []}, Settings(max_new_tokens=4))
        assert follow.forecast.cached_tokens >= plan.num_tokens - 16
        second = list(service.respond(conv))[-1]
        assert second.record.cache_state == "warm"
        assert second.record.cached_tokens >= plan.num_tokens - 16
