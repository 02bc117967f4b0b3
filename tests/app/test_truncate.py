"""Truncation to fit the context: water-filling budgets, token-boundary cuts, visible notes."""
import pytest

from app.conversation import Document
from app.truncate import cut_to_tokens, truncate_documents, water_fill


def words(n, tag="w"):
    return " ".join(f"{tag}{i}" for i in range(n))


def count(text):
    return len(text.split())


def test_water_fill_takes_from_the_largest_first():
    assert water_fill([10, 20], 100) == [10, 20]
    assert water_fill([10, 100], 60) == [10, 50]
    assert water_fill([30, 30, 30], 60) == [20, 20, 20]
    budgets = water_fill([5, 500, 80], 200)
    assert budgets[0] == 5 and sum(budgets) <= 200 and budgets[1] >= budgets[2]
    assert water_fill([10, 10], -5) == [0, 0]


def test_cut_to_tokens_is_the_longest_fitting_prefix():
    text = words(100)
    cut = cut_to_tokens(text, 37, count)
    assert count(cut) == 37 and text.startswith(cut)
    assert cut_to_tokens(text, 500, count) == text
    assert cut_to_tokens(text, 0, count) == ""


def test_truncate_documents_makes_room_and_says_so():
    small = Document("a.txt", "text", words(50, "a"), num_tokens=50)
    big = Document("b.txt", "text", words(1000, "b"), num_tokens=1000)
    image = Document("c.png", "image")
    out = truncate_documents([small, image, big], overflow=400, count_tokens=count)
    assert out[0] is small and out[1] is image            # small docs and images untouched
    cut = out[2]
    assert cut.truncated[1] == 1000 and cut.truncated[0] < 1000
    assert sum(d.num_tokens for d in out) <= 1050 - 400
    assert "truncated this document" in cut.text and cut.text.startswith("b0 b1")
    # Re-truncating a truncated document keeps the original size in its record.
    again = truncate_documents(out, overflow=100, count_tokens=count)
    assert again[2].truncated[1] == 1000


def test_truncate_documents_refuses_when_impossible():
    doc = Document("a.txt", "text", words(20), num_tokens=20)
    with pytest.raises(ValueError):
        truncate_documents([doc], overflow=500, count_tokens=count)
