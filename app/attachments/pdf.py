"""PDF -> prompt text with page markers, via pypdf.

Any failure inside pypdf (it raises many exception types on damaged input) becomes an
AttachmentError; PDFs longer than limits.max_pdf_pages are truncated with a note, not refused.
"""
from __future__ import annotations

import io
import time

from .model import Attachment, AttachmentError, AttachmentLimits

_DAMAGED = "“{name}” could not be read, the file looks damaged or truncated."


def load_pdf(name: str, data: bytes, limits: AttachmentLimits) -> Attachment:
    import pypdf  # imported lazily: only PDF uploads pay for it
    from pypdf.errors import DependencyError, FileNotDecryptedError

    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            _decrypt_with_empty_password(reader, name)
        total = len(reader.pages)
    except AttachmentError:
        raise
    except (DependencyError, NotImplementedError) as exc:
        raise AttachmentError(
            f"“{name}” is encrypted with a method this app cannot open. "
            "Remove the password protection (e.g. “Print to PDF”) and upload it again."
        ) from exc
    except FileNotDecryptedError as exc:
        raise _password_error(name) from exc
    except Exception as exc:  # noqa: BLE001 — pypdf raises anything on corrupt input
        raise AttachmentError(_DAMAGED.format(name=name)) from exc

    if total == 0:
        raise AttachmentError(f"“{name}” is empty: the PDF has no pages.")
    used = min(total, limits.max_pdf_pages)
    notes: list[str] = []
    if used < total:
        notes.append(f"“{name}” has {total} pages; only the first {used} were read (limit {limits.max_pdf_pages}).")

    blocks, empty_pages, failed_pages = [], [], []
    deadline = time.monotonic() + limits.max_pdf_seconds
    for index in range(used):
        if index and time.monotonic() > deadline:  # e.g. pages full of pathological streams
            notes.append(f"Reading “{name}” took too long; only the first {index} of {total} pages were read.")
            used = index
            break
        try:
            page_text = reader.pages[index].extract_text() or ""
        except Exception:  # noqa: BLE001 — one bad page should not lose the rest
            page_text = ""
            failed_pages.append(index + 1)
        page_text = page_text.replace("\r\n", "\n").replace("\r", "\n").strip()
        if not page_text and (index + 1) not in failed_pages:
            empty_pages.append(index + 1)
        blocks.append(f"--- page {index + 1} ---\n{page_text or '[no extractable text on this page]'}\n")

    if len(failed_pages) == used:
        raise AttachmentError(_DAMAGED.format(name=name))
    if len(empty_pages) + len(failed_pages) == used:
        raise AttachmentError(
            f"“{name}” contains no extractable text — it looks like a scanned document; OCR is not supported."
        )
    if empty_pages:
        notes.append(f"{_pages_phrase(empty_pages)} of “{name}” {'has' if len(empty_pages) == 1 else 'have'} "
                     "no extractable text (scanned images?).")
    if failed_pages:
        notes.append(f"{_pages_phrase(failed_pages)} of “{name}” could not be read (damaged).")

    pages_label = f"{total} pages" if total != 1 else "1 page"
    if used < total:
        pages_label += f", first {used} included"
    text = f"=== file: {name} ({pages_label}) ===\n" + "\n".join(blocks)
    meta = {"pages": total, "pages_read": used, "empty_pages": empty_pages, "failed_pages": failed_pages}
    return Attachment(kind="text", name=name, text=text, notes=notes, meta=meta)


def _decrypt_with_empty_password(reader, name: str) -> None:
    """Many PDFs are 'encrypted' only with an owner password and open with an empty one."""
    from pypdf import PasswordType

    if reader.decrypt("") == PasswordType.NOT_DECRYPTED:
        raise _password_error(name)


def _password_error(name: str) -> AttachmentError:
    return AttachmentError(
        f"“{name}” is password protected. Remove the password (e.g. open it and “Print to PDF”) "
        "and upload it again."
    )


def _pages_phrase(pages: list[int]) -> str:
    """'Page 3', 'Pages 2, 5, 9' or 'Pages 2, 5, 9, 11, 12 and 40 more'."""
    if len(pages) == 1:
        return f"Page {pages[0]}"
    shown = ", ".join(str(p) for p in pages[:8])
    rest = len(pages) - 8
    return f"Pages {shown}" + (f" and {rest} more" if rest > 0 else "")
