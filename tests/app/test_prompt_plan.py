"""Prompt composition (stable prefix across turns) and the pre-send plan: limits,
truncation on request only, unsupported images and files, forecast inputs."""
from app.attachments import AttachmentLimits
from app.conversation import Conversation, Document, Turn
from app.documents import DocumentLoader
from app.forecast import PrefillModel
from app.plan import Settings, plan_message
from app.prompt import compose_messages, user_text


def loader_for(engine, max_bytes=1 << 20):
    return DocumentLoader(AttachmentLimits(max_file_bytes=max_bytes), engine.count_tokens)


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_documents_stay_in_their_turn_so_the_prefix_is_stable():
    doc = Document("r.txt", "text", "REPORT TEXT", num_tokens=2)
    first = Turn("What is it?", [doc], answer="A report.", status="done")
    second = Turn("Who wrote it?")
    before = compose_messages([], first)
    after = compose_messages([first], second)
    assert after[:len(before)] == before                # turn 1 renders identically later
    assert after[-2] == {"role": "assistant", "content": "A report."}
    assert user_text(first) == "REPORT TEXT\n\nWhat is it?"
    assert "REPORT TEXT" not in after[-1]["content"]


def test_history_skips_failed_and_empty_stopped_turns():
    conv = Conversation([Turn("a", answer="x", status="done"), Turn("b", status="error"),
                         Turn("c", status="stopped"), Turn("d", answer="partial", status="stopped")])
    assert [t.question for t in conv.history()] == ["a", "d"]


def test_plan_counts_and_forecasts(word_engine, tmp_path):
    path = write(tmp_path, "notes.md", "alpha beta gamma " * 10)
    plan = plan_message(word_engine, loader_for(word_engine), PrefillModel(), Conversation(),
                        {"text": "Summarize please", "files": [path]}, Settings(max_new_tokens=50))
    assert plan.sendable and not plan.errors
    assert plan.turn.documents[0].name == "notes.md"
    assert plan.budget == 150 and plan.num_tokens <= 150
    assert plan.forecast.num_tokens == plan.num_tokens and plan.forecast.cached_tokens == 0
    word_engine.cached = plan.token_ids                  # now the cache holds this prompt
    again = plan_message(word_engine, loader_for(word_engine), PrefillModel(), Conversation(),
                         {"text": "Summarize please", "files": [path]}, Settings(max_new_tokens=50))
    assert again.forecast.cached_tokens == plan.num_tokens - 1
    assert again.forecast.expected_seconds < plan.forecast.expected_seconds


def test_over_the_limit_is_explained_and_truncated_only_when_asked(word_engine, tmp_path):
    path = write(tmp_path, "big.txt", " ".join(f"w{i}" for i in range(400)))
    loader, model = loader_for(word_engine), PrefillModel()
    message = {"text": "What is this?", "files": [path]}
    plan = plan_message(word_engine, loader, model, Conversation(), message, Settings(max_new_tokens=50))
    assert not plan.sendable and plan.over_by > 0 and plan.truncation_possible
    assert "Truncate documents to fit" in plan.blocking_reason()
    assert plan.turn.documents[0].truncated is None        # never cut silently
    cut = plan_message(word_engine, loader, model, Conversation(), message,
                       Settings(max_new_tokens=50, truncate=True))
    assert cut.sendable and cut.truncated and cut.over_by_before_truncation == plan.over_by
    assert any("truncated" in note for note in cut.notes)
    assert "truncated this document" in cut.prompt_text


def test_history_alone_too_long_suggests_a_new_chat(word_engine):
    long_turn = Turn("q " * 180, answer="a", status="done")
    plan = plan_message(word_engine, loader_for(word_engine), PrefillModel(),
                        Conversation([long_turn]), {"text": "and?"}, Settings(max_new_tokens=50))
    assert not plan.sendable and "new chat" in plan.blocking_reason()


def test_images_without_a_vision_tower_are_refused_plainly(word_engine):
    from tests.app.conftest import ASSETS
    image = ASSETS / "sample_image.png"
    plan = plan_message(word_engine, loader_for(word_engine, 50 << 20), PrefillModel(),
                        Conversation(), {"text": "What is this?", "files": [str(image)]}, Settings())
    assert not plan.sendable
    assert "cannot see images" in plan.blocking_reason() and "sample_image.png" in plan.blocking_reason()


def test_attachment_errors_block_sending_with_the_loader_message(word_engine, tmp_path):
    bad = tmp_path / "deck.pptx"
    bad.write_bytes(b"PK\x03\x04 not really a deck")
    big = write(tmp_path, "big.txt", "x" * 5000)
    plan = plan_message(word_engine, loader_for(word_engine, max_bytes=1000), PrefillModel(),
                        Conversation(), {"text": "hi", "files": [str(bad), big]}, Settings())
    assert not plan.sendable and len(plan.errors) == 2
    assert "deck.pptx" in plan.errors[0] and "big.txt" in plan.errors[1]


def test_empty_message_reports_the_conversation_size(word_engine):
    plan = plan_message(word_engine, loader_for(word_engine), PrefillModel(), Conversation(),
                        {"text": "  ", "files": []}, Settings())
    assert plan.empty and not plan.sendable and plan.num_tokens > 0
