"""Conversation -> chat messages. Documents stay in the user message of the turn that
attached them, so later turns only append to the prompt and the prefix cache stays warm."""
from __future__ import annotations

from typing import List, Sequence

from .conversation import Turn

SYSTEM_PROMPT = ("You are Longread, an assistant that answers questions about the documents, "
                 "code and files the user attaches. Answer from their content and say so when "
                 "the answer is not in them.")
DEFAULT_QUESTION = "Summarize the attached document."
DEFAULT_QUESTION_MANY = "Summarize the attached documents."


def default_question(num_documents: int) -> str:
    return DEFAULT_QUESTION_MANY if num_documents > 1 else DEFAULT_QUESTION


def user_text(turn: Turn) -> str:
    """The user message of a turn: document texts in upload order, then the question.
    Deterministic: the same turn always renders to the same string."""
    parts = [doc.text for doc in turn.documents if doc.kind == "text" and doc.text]
    parts.append(turn.question)
    return "\n\n".join(parts)


def user_content(turn: Turn, images_supported: bool):
    """Text, or (for a vision model) HF-style content parts with the images first."""
    images = [doc for doc in turn.documents if doc.kind == "image"]
    if not images or not images_supported:
        return user_text(turn)
    return [{"type": "image", "image": doc.image} for doc in images] + \
           [{"type": "text", "text": user_text(turn)}]


def compose_messages(history: Sequence[Turn], new_turn: Turn, images_supported: bool = False,
                     system_prompt: str = SYSTEM_PROMPT) -> List[dict]:
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    for turn in history:
        messages.append({"role": "user", "content": user_content(turn, images_supported)})
        messages.append({"role": "assistant", "content": turn.answer})
    messages.append({"role": "user", "content": user_content(new_turn, images_supported)})
    return messages
