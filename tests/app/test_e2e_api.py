"""End to end over HTTP: the app started with `python launch.py` (real default model, login
required), driven with gradio_client: upload a PDF, stream an answer, read the stats back."""
import pytest
from gradio_client import Client, handle_file

from tests.app.conftest import ASSETS, TEST_PASSWORD, TEST_USER


@pytest.fixture(scope="module")
def client(app_server):
    return Client(app_server, auth=(TEST_USER, TEST_PASSWORD), verbose=False)


def test_login_is_required(app_server):
    with pytest.raises(Exception):
        Client(app_server, verbose=False)
    with pytest.raises(Exception):
        Client(app_server, auth=(TEST_USER, "wrong"), verbose=False)


def test_pdf_question_streams_an_answer_then_a_warm_follow_up(client):
    pdf = handle_file(str(ASSETS / "sample_report.pdf"))
    job = client.submit({"text": "How many turbines did the company operate at the end of 2024?",
                         "files": [pdf]}, False, 24, 0.0, api_name="/ask")
    updates = list(job)
    answer, report = updates[-1]
    phases = [r["phase"] for _, r in updates]
    assert "reading" in phases, phases                       # prefill progress was streamed
    progress = [r["progress"] for _, r in updates if r["phase"] == "reading"]
    assert any(0 < p < 1 for p in progress) and progress == sorted(progress)
    assert len([a for a, _ in updates if a]) >= 2           # the answer itself streamed
    assert answer.strip() and report["phase"] == "done"
    record = report["record"]
    assert record["prompt_tokens"] > 2000 and record["cache_state"] == "cold"
    assert record["ttft"] > 0 and record["prefill_time"] > 0 and record["queue_time"] >= 0
    assert record["decode_tokens_per_s"] > 0 and record["forecast_ttft"] > 0
    forecast = report["forecast"]           # at most a shared system prompt is cached
    assert forecast["cached_tokens"] < 0.1 * record["prompt_tokens"]
    assert 0.9 * forecast["cold"] <= forecast["expected"] <= forecast["cold"]

    answer2, report2 = client.predict({"text": "Who is the chief executive?", "files": []},
                                      False, 24, 0.0, api_name="/ask")
    record2 = report2["record"]
    assert answer2.strip() and record2["cache_state"] == "warm"
    assert record2["cached_tokens"] >= record["prompt_tokens"] - 16
    assert record2["ttft"] < record["ttft"]
    assert report2["forecast"]["cached_tokens"] > 0

    stats = client.predict(api_name="/stats")
    ids = [r["request_id"] for r in stats["requests"]]
    assert record["request_id"] in ids and record2["request_id"] in ids
    assert stats["engine"]["prefix_cache_hits"] >= record2["cached_tokens"]
    assert stats["engine"]["num_running"] == 0
    assert stats["forecast_samples"] >= 4                   # calibration + the two requests
    memory = stats["sample"]["devices"]["cpu (host RAM)"]
    assert memory["weights"] > 100e6 and memory["kv_cached"] > 0


def test_bad_messages_are_refused_with_a_reason(client, tmp_path):
    image = handle_file(str(ASSETS / "sample_image.png"))
    with pytest.raises(Exception, match="cannot see images"):
        client.predict({"text": "What is this?", "files": [image]}, False, 24, 0.0, api_name="/ask")
    client.predict(api_name="/new_chat")
    with pytest.raises(Exception, match="Type a question"):
        client.predict({"text": "", "files": []}, False, 24, 0.0, api_name="/ask")
