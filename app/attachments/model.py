"""Data types of the attachment layer: the result, the limits and the one error type."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MB = 1024 * 1024


class AttachmentError(Exception):
    """The only exception load_attachment raises for bad input.

    `.message` is a complete sentence meant to be shown to a non-expert user as is.
    """

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class AttachmentLimits:
    """Resource limits; every one is enforced before the corresponding work is done."""

    max_file_bytes: int = 50 * MB  # size of the uploaded file itself (checked via stat)
    max_pdf_pages: int = 500  # longer PDFs are truncated to this many pages, with a note
    max_pdf_seconds: int = 120  # text extraction stops (with a note) after this much time
    max_files: int = 2000  # files included from an archive
    max_total_uncompressed_bytes: int = 64 * MB  # bytes ever inflated from one archive
    max_member_bytes: int = 2 * MB  # bigger archive members are skipped
    max_image_pixels: int = 64_000_000  # width * height, checked from the header

    def __post_init__(self) -> None:
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"AttachmentLimits.{name} must be a positive int, got {value!r}")

    @classmethod
    def from_max_file_mb(cls, max_file_mb: float, **overrides: int) -> "AttachmentLimits":
        """Limits for the app's --max-file-mb flag (1 MB = 1024 * 1024 bytes)."""
        return cls(max_file_bytes=max(1, int(max_file_mb * MB)), **overrides)


@dataclass
class Attachment:
    kind: str  # "text" or "image"
    name: str  # display name (basename)
    text: str = field(default="", repr=False)  # prompt text; "" for images
    image: Any = field(default=None, repr=False)  # PIL.Image.Image (RGB, loaded) for images
    notes: list[str] = field(default_factory=list)  # user-facing remarks
    meta: dict[str, Any] = field(default_factory=dict)


def human_size(n: int) -> str:
    """Short human-readable size, e.g. 512 bytes, 3.4 KB, 50 MB."""
    if n < 1024:
        return f"{n} bytes"
    for unit in ("KB", "MB", "GB", "TB"):
        n /= 1024
        if n < 1024 or unit == "TB":
            text = f"{n:.1f}".rstrip("0").rstrip(".")
            return f"{text} {unit}"
    raise AssertionError("unreachable")


def name_list(names: list[str], limit: int = 5) -> str:
    """'a, b, c' or 'a, b, c, d, e and 7 more'."""
    shown = ", ".join(names[:limit])
    rest = len(names) - limit
    return f"{shown} and {rest} more" if rest > 0 else shown
