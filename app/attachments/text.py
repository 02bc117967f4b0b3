"""Bytes -> prompt text for source and text files: decoding, binary and minified detection."""
from __future__ import annotations

import codecs
from dataclasses import dataclass

from .model import Attachment, AttachmentError, human_size

_MINIFIED_AVG_LINE = 500  # average characters per line above which text counts as minified
_MINIFIED_MIN_CHARS = 2000  # short one-liners are not "minified blobs"


@dataclass(frozen=True)
class Decoded:
    text: str  # newlines normalised to "\n"
    encoding: str
    note: str | None = None  # user-facing remark when the encoding was guessed


def decode(data: bytes, *, lenient: bool) -> Decoded | None:
    """Decode file bytes as text; None means "binary".

    lenient=True (the extension says text): invalid UTF-8 falls back to Windows-1252/Latin-1
    with a note. lenient=False (unknown extension): only valid UTF-8 counts as text.
    NUL bytes always mean binary, except in UTF-16 files that start with a byte-order mark
    (accepted only when lenient: from unknown files a "BOM" is too often just binary noise).
    """
    if lenient and data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        try:
            return Decoded(_normalise(data.decode("utf-16")), "utf-16")
        except UnicodeDecodeError:
            return None
    if b"\x00" in data:
        return None
    try:
        return Decoded(_normalise(data.decode("utf-8-sig")), "utf-8")
    except UnicodeDecodeError:
        if not lenient:
            return None
    try:
        text, encoding = data.decode("cp1252"), "windows-1252"
    except UnicodeDecodeError:  # cp1252 leaves 5 bytes undefined; latin-1 maps every byte
        text, encoding = data.decode("latin-1"), "latin-1"
    note = "is not valid UTF-8; it was read as Latin-1 (Windows-1252), so some characters may be wrong"
    return Decoded(_normalise(text), encoding, note)


def _normalise(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def looks_minified(text: str) -> bool:
    """Long text whose lines average more than 500 characters (bundled/minified code, data blobs)."""
    if len(text) < _MINIFIED_MIN_CHARS:
        return False
    lines = text.count("\n") + 1
    return len(text) / lines > _MINIFIED_AVG_LINE


def section(path: str, content: str) -> str:
    """One file's block in the prompt; always ends with a newline."""
    if content and not content.endswith("\n"):
        content += "\n"
    return f"=== file: {path} ===\n{content}"


def load_text(name: str, data: bytes, *, known_text: bool, supported: str) -> Attachment:
    """A single uploaded text/source file (known_text: the extension is a text one)."""
    decoded = decode(data, lenient=known_text)
    if decoded is None:
        if known_text:
            raise AttachmentError(
                f"“{name}” looks like a binary file, not text (it contains NUL bytes), so it cannot be read."
            )
        ext = name.rsplit(".", 1)[-1].lower() if "." in name else ""
        kind = f"file type .{ext}" if ext else "file type (no extension, not plain text)"
        raise AttachmentError(f"“{name}”: unsupported {kind}. Supported: {supported}.")
    if not decoded.text.strip():
        raise AttachmentError(f"“{name}” is empty — there is no text to read.")
    notes = [f"“{name}” {decoded.note}."] if decoded.note else []
    meta = {
        "bytes": len(data),
        "lines": decoded.text.count("\n") + (0 if decoded.text.endswith("\n") else 1),
        "encoding": decoded.encoding,
        "size": human_size(len(data)),
    }
    return Attachment(kind="text", name=name, text=section(name, decoded.text), notes=notes, meta=meta)
