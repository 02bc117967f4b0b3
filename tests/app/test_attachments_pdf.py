"""PDF attachments: real PDFs built by assets/minipdf.py (and pypdf for encryption)."""
from __future__ import annotations

import importlib.util
import io
import zlib
from pathlib import Path

import pypdf
import pytest

from app.attachments import AttachmentError, AttachmentLimits, load_attachment

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("minipdf", ROOT / "assets" / "minipdf.py")
minipdf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(minipdf)

MB = 1024 * 1024
PAGE_TEXTS = [
    "Quarterly memo. Revenue was 12.5 million euros in the first quarter.",
    "Second page: the warehouse in Tromso ships 340 parcels per day.",
    "Third page: Contact Ana Ruiz (ext. 4471) for questions.",
]


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def encrypted(data: bytes, user_password: str, owner_password: str = "owner-secret") -> bytes:
    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(io.BytesIO(data)))
    writer.encrypt(user_password=user_password, owner_password=owner_password, algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def scanned_page(seed: int) -> "minipdf.Page":
    """A page holding only a raster image, like a scan without OCR."""
    w, h = 40, 50
    rgb = bytes((x * 7 + y * 3 + seed) % 256 for y in range(h) for x in range(w) for _ in range(3))
    return minipdf.Page().image(50, 50, 500, 690, w, h, rgb)


def test_multi_page_pdf_has_header_page_markers_and_text(tmp_path):
    att = load_attachment(write(tmp_path, "memo.pdf", minipdf.text_pdf(PAGE_TEXTS)))
    assert att.kind == "text" and att.name == "memo.pdf" and att.image is None
    assert att.text.startswith("=== file: memo.pdf (3 pages) ===\n--- page 1 ---\n")
    markers = [att.text.index(f"--- page {n} ---") for n in (1, 2, 3)]
    assert markers == sorted(markers)
    assert "12.5 million euros" in att.text[markers[0]:markers[1]]
    assert "340 parcels per day" in att.text[markers[1]:markers[2]]
    assert "Ana Ruiz (ext. 4471)" in att.text[markers[2]:]
    assert att.meta["pages"] == 3 and att.notes == []


def test_password_protected_pdf_is_refused_clearly(tmp_path):
    data = encrypted(minipdf.text_pdf(PAGE_TEXTS), user_password="hunter2")
    with pytest.raises(AttachmentError) as err:
        load_attachment(write(tmp_path, "locked.pdf", data))
    assert "password protected" in err.value.message
    assert "locked.pdf" in err.value.message


def test_pdf_encrypted_with_empty_user_password_is_read(tmp_path):
    data = encrypted(minipdf.text_pdf(PAGE_TEXTS), user_password="")
    assert pypdf.PdfReader(io.BytesIO(data)).is_encrypted  # really encrypted
    att = load_attachment(write(tmp_path, "owner-only.pdf", data))
    assert "340 parcels per day" in att.text and att.meta["pages"] == 3


@pytest.mark.parametrize("fraction", [0.02, 0.3, 0.6, 0.95])
def test_truncated_pdf_is_reported_as_damaged(tmp_path, fraction):
    data = minipdf.text_pdf(PAGE_TEXTS)
    with pytest.raises(AttachmentError) as err:
        load_attachment(write(tmp_path, "cut.pdf", data[: int(len(data) * fraction)]))
    assert "could not be read, the file looks damaged or truncated" in err.value.message


def test_garbage_named_pdf_is_reported_as_damaged(tmp_path):
    with pytest.raises(AttachmentError, match="damaged or truncated"):
        load_attachment(write(tmp_path, "fake.pdf", b"%PDF-1.7\n" + bytes(range(256)) * 20))


def test_pdf_without_pages_is_refused(tmp_path):
    writer = pypdf.PdfWriter()  # a valid document with an empty page tree
    out = io.BytesIO()
    writer.write(out)
    for name, data in (("empty-pypdf.pdf", out.getvalue()), ("empty-mini.pdf", minipdf.build_pdf([]))):
        with pytest.raises(AttachmentError) as err:
            load_attachment(write(tmp_path, name, data))
        assert "no pages" in err.value.message


def test_scanned_pdf_without_text_is_refused(tmp_path):
    data = minipdf.build_pdf([scanned_page(1), scanned_page(2), minipdf.Page()])  # 2 scans + blank
    with pytest.raises(AttachmentError) as err:
        load_attachment(write(tmp_path, "scan.pdf", data))
    assert "contains no extractable text" in err.value.message
    assert "scanned document; OCR is not supported" in err.value.message


def test_partly_scanned_pdf_is_read_with_a_note(tmp_path):
    text_page = minipdf.Page().text(72, 700, "Typed cover letter, dated 3 May.")
    att = load_attachment(write(tmp_path, "mixed.pdf", minipdf.build_pdf([text_page, scanned_page(3)])))
    assert "Typed cover letter, dated 3 May." in att.text
    assert "--- page 2 ---\n[no extractable text on this page]" in att.text
    assert att.meta["empty_pages"] == [2]
    assert any("Page 2" in note and "no extractable text" in note for note in att.notes)


def test_long_pdf_is_truncated_to_the_page_limit_with_a_note(tmp_path):
    texts = [f"Chapter {n} begins here with marker M{n}X." for n in range(1, 7)]
    limits = AttachmentLimits(max_pdf_pages=4)
    att = load_attachment(write(tmp_path, "book.pdf", minipdf.text_pdf(texts)), limits)
    assert att.text.startswith("=== file: book.pdf (6 pages, first 4 included) ===")
    assert "M4X" in att.text and "M5X" not in att.text and "--- page 5 ---" not in att.text
    assert att.meta["pages"] == 6 and att.meta["pages_read"] == 4
    assert any("only the first 4" in note for note in att.notes)


def test_pdf_without_extension_is_sniffed(tmp_path):
    att = load_attachment(write(tmp_path, "download", minipdf.text_pdf(PAGE_TEXTS)))
    assert "--- page 3 ---" in att.text and "Ana Ruiz" in att.text


def test_non_latin_text_does_not_break_the_writer_or_reader(tmp_path):
    # minipdf writes WinAnsi; characters outside it become '?', the rest must round-trip.
    att = load_attachment(write(tmp_path, "cafe.pdf", minipdf.text_pdf(["Caf\u00e9 cr\u00e8me (100%) \\ done"])))
    assert "Caf\u00e9 cr\u00e8me (100%) \\ done" in att.text


def test_pdf_page_with_a_decompression_bomb_is_skipped(tmp_path):
    # Page 2's content stream inflates to 100 MB; pypdf's own output limit stops it, and only
    # that page is lost. The stream is compressed chunk by chunk, so the test stays light.
    packer = zlib.compressobj(9)
    parts = [packer.compress(b"BT /F1 11 Tf 72 700 Td (bomb) Tj ET\n")]
    parts += [packer.compress(bytes(b" ") * MB) for _ in range(100)]
    bomb = minipdf.Page()
    bomb.flate_content = b"".join(parts) + packer.flush()
    assert len(bomb.flate_content) < 200_000
    cover = minipdf.Page().text(72, 700, "Normal first page about tides.")
    att = load_attachment(write(tmp_path, "bomb.pdf", minipdf.build_pdf([cover, bomb])))
    assert "Normal first page about tides." in att.text and "bomb" not in att.text.replace("bomb.pdf", "")
    assert att.meta["failed_pages"] == [2]
    assert any("Page 2" in n and "could not be read" in n for n in att.notes)


def test_pdf_extraction_time_budget(tmp_path, monkeypatch):
    import app.attachments.pdf as pdf_module

    clock = iter(range(0, 1000, 10))  # every reading of the clock advances 10 s
    monkeypatch.setattr(pdf_module.time, "monotonic", lambda: next(clock))
    texts = [f"Section {n} marker Q{n}Q." for n in range(1, 9)]
    att = load_attachment(write(tmp_path, "slow.pdf", minipdf.text_pdf(texts)), AttachmentLimits(max_pdf_seconds=25))
    # deadline = 0 + 25; checks before pages 2, 3, 4 read 10, 20, 30 -> stop after 3 pages
    assert "Q3Q" in att.text and "Q4Q" not in att.text and att.meta["pages_read"] == 3
    assert att.text.startswith("=== file: slow.pdf (8 pages, first 3 included) ===")
    assert any("took too long" in n for n in att.notes)
