"""The pre-send check: what a message would send, its token count against the context limit,
what the prefix cache already holds of it, and the TTFT forecast.

The same Plan drives the live preview under the textbox and the final check on send, so the
numbers the user saw are the numbers that were sent.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from .conversation import Conversation, Turn
from .documents import DocumentLoader
from .forecast import Forecast, PrefillModel
from .prompt import compose_messages, default_question
from .truncate import truncate_documents

MAX_TRUNCATION_ROUNDS = 3


@dataclass
class Settings:
    """Per-message knobs from the UI."""
    max_new_tokens: int = 512
    temperature: float = 0.0
    truncate: bool = False            # the user's explicit consent to cut documents to fit


@dataclass
class Plan:
    turn: Optional[Turn]
    messages: List[dict]
    prompt_text: Optional[str]
    token_ids: List[int]
    max_model_len: int
    reserve: int                      # tokens kept free for the answer
    empty: bool = False               # nothing typed, nothing attached
    errors: List[str] = field(default_factory=list)      # block sending; user-facing
    notes: List[str] = field(default_factory=list)       # shown, do not block
    over_by_before_truncation: int = 0
    truncation_possible: bool = False
    history_turns: int = 0            # earlier turns in the prompt
    forecast: Optional[Forecast] = None

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def budget(self) -> int:
        """Most prompt tokens that leave `reserve` tokens for the answer."""
        return self.max_model_len - self.reserve

    @property
    def over_by(self) -> int:
        return max(0, self.num_tokens - self.budget)

    @property
    def truncated(self) -> bool:
        return bool(self.turn) and any(d.truncated for d in self.turn.documents)

    @property
    def sendable(self) -> bool:
        return not self.errors and not self.empty and self.over_by == 0

    def blocking_reason(self) -> Optional[str]:
        """Why this message cannot be sent as is (user-facing), or None."""
        if self.errors:
            return " ".join(self.errors)
        if self.empty:
            return "Type a question or attach a file first."
        if self.over_by:
            if self.truncation_possible:
                hint = (" Tick “Truncate documents to fit” to cut the attached documents, or "
                        "remove some files.")
            elif self.history_turns:
                hint = " The conversation so far is too long: start a new chat."
            else:
                hint = " Shorten the message."
            return (f"The prompt is {self.num_tokens:,} tokens but at most {self.budget:,} fit "
                    f"({self.max_model_len:,}-token context minus {self.reserve:,} for the "
                    f"answer): {self.over_by:,} too many.{hint}")
        return None


def answer_reserve(max_new_tokens: int, max_model_len: int) -> int:
    return max(1, min(int(max_new_tokens), max_model_len // 2))


def image_error(model_name: str, names: List[str]) -> str:
    listed = ", ".join(f"“{n}”" for n in names)
    return (f"{model_name} cannot see images (it has no vision tower), so {listed} cannot be "
            f"sent. Remove the image to ask about the rest, or start Longread with a vision "
            f"model (--model PATH to a Qwen2-VL / Qwen2.5-VL directory).")


def plan_message(engine, loader: DocumentLoader, model: PrefillModel, conversation: Conversation,
                 message: Optional[dict], settings: Settings) -> Plan:
    message = message or {}
    typed = (message.get("text") or "").strip()
    files = [f for f in (message.get("files") or []) if f]
    files = [f["path"] if isinstance(f, dict) else str(f) for f in files]
    loaded = loader.load(files)
    docs = loaded.documents
    errors = list(loaded.errors)
    images = [d.name for d in docs if d.kind == "image"]
    if images and not engine.supports_images:
        errors.append(image_error(engine.model_name, images))
    notes = [note for d in docs for note in d.notes]
    empty = not typed and not files
    turn = Turn(question=typed or default_question(len(docs)), documents=docs,
                typed_text=message.get("text") or "", files=files)
    reserve = answer_reserve(settings.max_new_tokens, engine.max_model_len)
    plan = Plan(turn=turn, messages=[], prompt_text=None, token_ids=[],
                max_model_len=engine.max_model_len, reserve=reserve, empty=empty,
                errors=errors, notes=notes)
    history = conversation.history()
    plan.history_turns = len(history)
    if empty:
        turn = Turn(question="")                      # count the conversation so far
    if not _tokenize(engine, plan, history, turn):
        return plan
    plan.over_by_before_truncation = plan.over_by
    plan.truncation_possible = any(d.kind == "text" and d.num_tokens for d in turn.documents)
    rounds = 0
    while plan.over_by and settings.truncate and plan.truncation_possible \
            and rounds < MAX_TRUNCATION_ROUNDS:
        rounds += 1
        try:
            turn.documents = truncate_documents(turn.documents, plan.over_by, engine.count_tokens)
        except ValueError:
            plan.truncation_possible = False
            break
        _tokenize(engine, plan, history, turn)
    if plan.truncated:
        plan.notes += [f"“{d.name}” will be truncated to its first {d.truncated[0]:,} of "
                       f"{d.truncated[1]:,} tokens to fit." for d in turn.documents if d.truncated]
    # With images the cache key includes each image's content, so ask with the messages.
    images = any(isinstance(m["content"], list) for m in plan.messages)
    probe = plan.messages if images else plan.token_ids
    cached = engine.cached_prefix_tokens(probe) if plan.token_ids else 0
    plan.forecast = model.forecast(plan.num_tokens, cached)
    return plan


def _tokenize(engine, plan: Plan, history, turn: Turn) -> bool:
    plan.messages = compose_messages(history, turn, images_supported=engine.supports_images)
    try:
        plan.prompt_text, plan.token_ids = engine.tokenize(plan.messages)
    except Exception as exc:              # e.g. a model without a chat template
        plan.errors.append(f"The prompt could not be built: {exc}")
        plan.token_ids = []
        return False
    return True
