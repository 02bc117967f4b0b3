"""Attachment layer: turn one uploaded file into prompt text or a checked image.

    from app.attachments import load_attachment, AttachmentError, AttachmentLimits
    att = load_attachment(path, limits=AttachmentLimits.from_max_file_mb(50))
    att.kind, att.name, att.text, att.image, att.notes, att.meta

load_attachment raises only AttachmentError for bad input; its .message is user-facing.
Routing (by extension; unknown or missing extensions are sniffed from the first bytes):
- PDF -> "=== file: x.pdf (N pages) ===" + "--- page K ---" blocks (pdf.py); longer than
  max_pdf_pages -> truncated with a note; encrypted, empty, damaged, scanned -> refused.
- .png/.jpg/.jpeg/.webp/.gif/.bmp -> RGB PIL image, pixel count checked from the header (image.py).
- .zip/.tar/.tar.gz/.tgz/.tar.bz2/.tar.xz -> one "=== file: path ===" section per text file,
  extracted in memory under byte/file limits, with skip notes (archive.py).
- text/source files, and unknown extensions that are valid UTF-8 -> one section (text.py).
- anything else -> "unsupported file type".
Nothing is written to disk and no global state (PIL limits, logging, warnings) is changed.
"""
from __future__ import annotations

import os
from pathlib import Path

from . import formats
from .model import Attachment, AttachmentError, AttachmentLimits, human_size

__all__ = [
    "Attachment", "AttachmentError", "AttachmentLimits",
    "load_attachment", "supported_extensions", "supported_filenames",
]

supported_extensions = formats.supported_extensions
supported_filenames = formats.supported_filenames

_SUPPORTED_SUMMARY = (
    "PDF (.pdf), images (.png, .jpg, .webp, .gif, .bmp), archives (.zip, .tar, .tar.gz, .tgz, "
    ".tar.bz2, .tar.xz) and text/source files (.txt, .md, .py, .js, .json, .csv …)"
)


def load_attachment(path: str | os.PathLike, limits: AttachmentLimits | None = None,
                    *, name: str | None = None) -> Attachment:
    """Load one file. `name` overrides the display name (default: the path's basename)."""
    limits = limits or AttachmentLimits()
    path = Path(path)
    name = name or path.name
    data = _read_bounded(path, name, limits.max_file_bytes)
    kind = formats.classify(name, data[:512])
    # Submodules are imported lazily so a text upload never imports pypdf or PIL.
    if kind == "pdf":
        from .pdf import load_pdf
        return load_pdf(name, data, limits)
    if kind == "image":
        from .image import load_image
        return load_image(name, data, limits)
    if kind == "zip" or kind.startswith("tar:"):
        from .archive import load_archive
        return load_archive(name, data, kind, limits)
    if kind == "binary":
        raise AttachmentError(_unsupported(name))
    from .text import load_text
    return load_text(name, data, known_text=(kind == "text"), supported=_SUPPORTED_SUMMARY)


def _read_bounded(path: Path, name: str, max_bytes: int) -> bytes:
    """The file's bytes; size is checked via stat first and again while reading (it may grow)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise AttachmentError(f"“{name}” could not be found (was the upload interrupted?).") from None
    except OSError as exc:
        raise AttachmentError(f"“{name}” could not be opened ({exc.strerror or 'access error'}).") from None
    if path.is_dir():
        raise AttachmentError(f"“{name}” is a folder; upload a .zip or .tar.gz of it instead.")
    if st.st_size > max_bytes:
        raise _too_large(name, st.st_size, max_bytes)
    try:
        with open(path, "rb") as handle:
            # Sized from stat: read(n) pre-allocates n bytes, so never ask for max_bytes blindly.
            data = handle.read(st.st_size + 1)
            if len(data) > st.st_size:  # the file grew after stat
                data += handle.read(max_bytes + 1 - len(data))
    except OSError as exc:
        raise AttachmentError(f"“{name}” could not be read ({exc.strerror or 'read error'}).") from None
    if len(data) > max_bytes:
        raise _too_large(name, len(data), max_bytes)
    if not data:
        raise AttachmentError(f"“{name}” is empty (0 bytes).")
    return data


def _too_large(name: str, size: int, limit: int) -> AttachmentError:
    return AttachmentError(
        f"“{name}” is {human_size(size)}, which is over the upload limit of {human_size(limit)}."
    )


def _unsupported(name: str) -> str:
    ext = formats.extension(name)
    office = formats.OFFICE_HINT.get(ext)
    if office:
        return (f"“{name}”: {office} files (.{ext}) are not supported. "
                f"Save or export it as PDF and upload the PDF. Supported: {_SUPPORTED_SUMMARY}.")
    return f"“{name}”: unsupported file type .{ext}. Supported: {_SUPPORTED_SUMMARY}."
