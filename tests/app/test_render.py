"""HTML and chat rendering: the numbers the user sees are the ones computed."""
import re

from app.chat import LiveView
from app.conversation import Conversation, Document, Turn
from app.forecast import Forecast
from app.plan import Plan
from app.render_chat import chat_messages
from app.render_panel import accuracy_table, precheck_html, request_card
from tests.app.test_metrics_charts import record


def plan(num_tokens, **kw):
    p = Plan(turn=Turn("q"), messages=[], prompt_text="", token_ids=list(range(num_tokens)),
             max_model_len=8192, reserve=512, **kw)
    p.forecast = Forecast(num_tokens, 0, 20.0, 20.0, 2)
    return p


def test_precheck_shows_count_limit_and_forecast():
    html = precheck_html(plan(2794))
    assert "data-tokens='2794'" in html and "7,680" in html and "~20.0 s" in html
    assert "data-state='ok'" in html and "lr-precheck-error" not in html


def test_precheck_explains_over_limit():
    p = plan(9000, truncation_possible=True)
    p.over_by_before_truncation = p.over_by
    html = precheck_html(p)
    assert "data-state='over'" in html and "1,320 too many" in html and "Truncate" in html


def test_request_card_live_progress_then_final_numbers():
    live = LiveView("reading", 2000, cached_tokens=0, done_tokens=500, elapsed=3.0, eta=9.0)
    html = request_card(live)
    assert "data-progress='0.250'" in html and "about 9.00 s left" in html
    assert "data-phase='reading'" in html
    done = request_card(None, record(7, 21.2, forecast=20.0))
    assert "Request #7" in done and "data-state='cold'" in done
    assert re.search(r"id='lr-ttft' data-seconds='21\.2", done) and "+6%" in done
    warm = request_card(None, record(8, 0.3, cached=990))
    assert "data-state='warm'" in warm and "990 / 1,000" in warm


def test_accuracy_table_lists_recent_requests():
    html = accuracy_table([record(1, 22.0, forecast=20.0), record(2, 0.3, cached=990, forecast=0.4)])
    assert "#2" in html and "+10%" in html and "-25%" in html and "median error" in html


def test_chat_messages_for_each_state():
    doc = Document("report.pdf", "text", "x", num_tokens=2794, meta={"pages": 11},
                   notes=["Skipped 1 binary file."])
    conv = Conversation([Turn("What?", [doc], typed_text="What?", answer="An answer.", status="done",
                              record=record(1, 21.0)),
                         Turn("Summarize the attached document.", [], status="reading")])
    view = LiveView("reading", 3000, done_tokens=1500, eta=5.0)
    msgs = chat_messages(conv, conv.turns[1], view)
    assert [m["role"] for m in msgs] == ["user", "assistant"] * 2
    assert "report.pdf" in msgs[0]["content"] and "11 pages" in msgs[0]["content"]
    assert "Skipped 1 binary file." in msgs[0]["content"]
    assert "TTFT 21.0 s · cold" in msgs[1]["content"]
    assert "*Summarize the attached document.*" == msgs[2]["content"]   # default question marked
    assert "1,500 done, 50%" in msgs[3]["content"]
    conv.turns[1].status = "stopped"
    assert "Stopped" in chat_messages(conv)[3]["content"]
    picture = Document("cat.png", "image", path="/tmp/cat.png", meta={"width": 4, "height": 3})
    msgs = chat_messages(Conversation([Turn("What?", [picture], typed_text="What?")]))
    assert msgs[1] == {"role": "user", "content": {"path": "/tmp/cat.png"}}   # shown inline
    assert "4×3" in msgs[0]["content"]
