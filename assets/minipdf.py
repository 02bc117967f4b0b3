"""A minimal, dependency-free PDF writer (text in the standard fonts, rectangles, RGB images).

Used by make_assets.py and the attachment tests to build real PDFs. Output is deterministic:
the same input always gives the same bytes (no dates, no random IDs).
"""
from __future__ import annotations

import zlib

FONTS = {"F1": "Helvetica", "F2": "Helvetica-Bold", "F3": "Courier"}
LETTER = (612, 792)


def _pdf_string(text: str) -> bytes:
    """A literal string in WinAnsi (cp1252); unencodable characters become '?'."""
    raw = text.encode("cp1252", errors="replace")
    return b"(" + raw.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)") + b")"


class Page:
    """Drawing operations for one page; coordinates in points, origin bottom-left."""

    def __init__(self, size: tuple[int, int] = LETTER):
        self.size = size
        self.ops: list[bytes] = []
        self.images: list[tuple[int, int, bytes]] = []  # (width_px, height_px, rgb bytes)
        self.flate_content: bytes | None = None  # already zlib-compressed stream; replaces ops

    def text(self, x: float, y: float, string: str, size: float = 11, font: str = "F1") -> "Page":
        self.ops.append(b"BT /%s %.1f Tf %.2f %.2f Td %s Tj ET" % (font.encode(), size, x, y, _pdf_string(string)))
        return self

    def rect(self, x: float, y: float, w: float, h: float, rgb=(0.8, 0.8, 0.8)) -> "Page":
        self.ops.append(b"%.3f %.3f %.3f rg %.2f %.2f %.2f %.2f re f" % (*rgb, x, y, w, h))
        return self

    def image(self, x: float, y: float, w: float, h: float, px_w: int, px_h: int, rgb: bytes) -> "Page":
        """Place an RGB raster (px_w * px_h * 3 bytes), e.g. to mimic a scanned page."""
        assert len(rgb) == px_w * px_h * 3, "rgb must hold exactly px_w * px_h * 3 bytes"
        name = b"Im%d" % len(self.images)
        self.images.append((px_w, px_h, rgb))
        self.ops.append(b"q %.2f 0 0 %.2f %.2f %.2f cm /%s Do Q" % (w, h, x, y, name))
        return self


def _stream(body: bytes, extra: bytes = b"", compress: bool = True) -> bytes:
    if compress:
        body = zlib.compress(body, 9)
        extra += b" /Filter /FlateDecode"
    return b"<< /Length %d%s >>\nstream\n%s\nendstream" % (len(body), extra, body)


def build_pdf(pages: list[Page], title: str = "", compress: bool = True) -> bytes:
    """Serialise pages into a complete PDF file (zero pages gives a valid, empty document)."""
    objects: list[bytes] = []  # object i+1 is objects[i]

    def add(obj: bytes) -> int:
        objects.append(obj)
        return len(objects)

    catalog = add(b"")  # filled in below, once the page tree number is known
    pages_id = add(b"")
    font_ids = {key: add(b"<< /Type /Font /Subtype /Type1 /BaseFont /%s /Encoding /WinAnsiEncoding >>"
                         % base.encode()) for key, base in FONTS.items()}
    fonts = b" ".join(b"/%s %d 0 R" % (k.encode(), v) for k, v in font_ids.items())
    kids = []
    for page in pages:
        xobjects = []
        for i, (pw, ph, rgb) in enumerate(page.images):
            extra = b" /Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace /DeviceRGB " \
                    b"/BitsPerComponent 8" % (pw, ph)
            xobjects.append(b"/Im%d %d 0 R" % (i, add(_stream(rgb, extra, compress=True))))
        if page.flate_content is not None:
            content = add(_stream(page.flate_content, b" /Filter /FlateDecode", compress=False))
        else:
            content = add(_stream(b"\n".join(page.ops), compress=compress))
        resources = b"<< /Font << %s >>%s >>" % (
            fonts, b" /XObject << " + b" ".join(xobjects) + b" >>" if xobjects else b"")
        kids.append(add(b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 %d %d] /Resources %s /Contents %d 0 R >>"
                        % (pages_id, page.size[0], page.size[1], resources, content)))
    objects[catalog - 1] = b"<< /Type /Catalog /Pages %d 0 R >>" % pages_id
    objects[pages_id - 1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
        b" ".join(b"%d 0 R" % k for k in kids), len(kids))
    info = add(b"<< /Title %s /Producer (Longread minipdf) >>" % _pdf_string(title))

    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % off for off in offsets)
    out += b"trailer\n<< /Size %d /Root %d 0 R /Info %d 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1, catalog, info, xref)
    return bytes(out)


def wrap(text: str, width_chars: int) -> list[str]:
    """Greedy word wrap by character count (Helvetica averages ~0.5 em per character)."""
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width_chars:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    if line:
        lines.append(line)
    return lines


def text_pdf(page_texts: list[str], size: float = 11, title: str = "") -> bytes:
    """One page per string; paragraphs (blank-line separated) are word-wrapped."""
    pages = []
    for body in page_texts:
        page, y = Page(), LETTER[1] - 72
        for paragraph in body.split("\n\n"):
            for line in wrap(paragraph, 90):
                page.text(72, y, line, size)
                y -= size * 1.35
            y -= size * 0.6
        pages.append(page)
    return build_pdf(pages, title=title)
