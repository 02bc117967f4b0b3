"""Attachment API basics: text files, size limits, unsupported types, and the sample assets."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from app.attachments import (Attachment, AttachmentError, AttachmentLimits, load_attachment,
                             supported_extensions, supported_filenames)

ROOT = Path(__file__).resolve().parents[2]
ASSETS = ROOT / "assets"
MB = 1024 * 1024


def write(tmp_path: Path, name: str, data: bytes | str) -> Path:
    path = tmp_path / name
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


# ---------------------------------------------------------------- text files
def test_source_file_becomes_one_section(tmp_path):
    att = load_attachment(write(tmp_path, "calc.py", "def add(a, b):\n    return a + b\n"))
    assert isinstance(att, Attachment) and att.kind == "text" and att.image is None
    assert att.text == "=== file: calc.py ===\ndef add(a, b):\n    return a + b\n"
    assert att.notes == [] and att.meta["encoding"] == "utf-8" and att.meta["lines"] == 2


@pytest.mark.parametrize("name", ["Dockerfile", "Makefile", "notes.md", "conf.yaml", "q.sql", "App.tsx",
                                  "main.rs", ".gitignore", "data.csv"])
def test_known_text_names(tmp_path, name):
    att = load_attachment(write(tmp_path, name, "FROM alpine\nRUN echo hi\n"))
    assert att.text.startswith(f"=== file: {name} ===\nFROM alpine\n")


def test_display_name_override_and_crlf(tmp_path):
    path = write(tmp_path, "tmp1234.txt", b"one\r\ntwo\rthree\n")
    att = load_attachment(path, name="minutes.txt")
    assert att.name == "minutes.txt" and att.text == "=== file: minutes.txt ===\none\ntwo\nthree\n"


def test_non_utf8_text_falls_back_with_a_note(tmp_path):
    data = "Gr\u00fc\u00dfe aus K\u00f6ln \u2013 \u201cquoted\u201d\n".encode("cp1252")
    att = load_attachment(write(tmp_path, "brief.txt", data))
    assert "Grüße aus Köln – “quoted”" in att.text
    assert att.meta["encoding"] == "windows-1252"
    assert len(att.notes) == 1 and "not valid UTF-8" in att.notes[0] and "brief.txt" in att.notes[0]
    latin1_only = b"caf\xe9 \x81\x8d\n"  # 0x81/0x8d are undefined in cp1252
    att = load_attachment(write(tmp_path, "old.txt", latin1_only))
    assert "café" in att.text and att.meta["encoding"] == "latin-1"


def test_utf8_bom_and_utf16_are_decoded(tmp_path):
    att = load_attachment(write(tmp_path, "bom.csv", b"\xef\xbb\xbfa,b\n1,2\n"))
    assert att.text == "=== file: bom.csv ===\na,b\n1,2\n"
    att = load_attachment(write(tmp_path, "wide.txt", "h\u00e9llo\n".encode("utf-16")))
    assert "héllo" in att.text and att.meta["encoding"] == "utf-16"


def test_binary_content_with_text_extension_is_refused(tmp_path):
    with pytest.raises(AttachmentError) as err:
        load_attachment(write(tmp_path, "weird.txt", b"abc\x00\x01\x02def"))
    assert "binary" in err.value.message and "weird.txt" in err.value.message


def test_unknown_extension_is_read_if_it_is_utf8_text(tmp_path):
    att = load_attachment(write(tmp_path, "notes.xyz", "plain words, caf\u00e9\n"))
    assert att.text == "=== file: notes.xyz ===\nplain words, café\n"


@pytest.mark.parametrize("name,data", [("blob.xyz", b"\x00\x01\x02binary"), ("blob.xyz", b"\xff\xfe\xfd" * 10),
                                       ("prog.exe", b"MZ\x90\x00"), ("noext", b"\x00\x00\x01")])
def test_unsupported_binary_types_are_refused(tmp_path, name, data):
    with pytest.raises(AttachmentError) as err:
        load_attachment(write(tmp_path, name, data))
    message = err.value.message
    assert "unsupported file type" in message and "Supported:" in message and ".pdf" in message
    ext = name.rpartition(".")[2]
    if "." in name:
        assert f".{ext}" in message


def test_office_documents_get_a_save_as_pdf_hint(tmp_path):
    with pytest.raises(AttachmentError) as err:
        load_attachment(write(tmp_path, "plan.docx", b"PK\x03\x04" + bytes(100)))
    assert "Word files (.docx) are not supported" in err.value.message and "PDF" in err.value.message


def test_empty_and_blank_files_are_refused(tmp_path):
    with pytest.raises(AttachmentError, match="is empty"):
        load_attachment(write(tmp_path, "empty.py", b""))
    with pytest.raises(AttachmentError, match="is empty"):
        load_attachment(write(tmp_path, "blank.md", b"  \n\n\t\n"))


# ---------------------------------------------------------------- size and path checks
def test_oversized_file_is_refused_from_stat_without_reading(tmp_path, monkeypatch):
    path = tmp_path / "huge.txt"
    with open(path, "wb") as handle:  # sparse: 60 MB on paper, nothing written
        handle.truncate(60 * MB)
    import builtins
    real_open = builtins.open

    def guarded_open(file, *args, **kwargs):
        assert Path(file) != path, "an oversized file must not be opened"
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", guarded_open)
    with pytest.raises(AttachmentError) as err:
        load_attachment(path)
    assert "60 MB" in err.value.message and "limit of 50 MB" in err.value.message
    with pytest.raises(AttachmentError, match=r"over the upload limit of 10 KB"):
        load_attachment(write(tmp_path, "small.txt", "x" * 20_000), AttachmentLimits(max_file_bytes=10 * 1024))


def test_limits_from_max_file_mb_and_validation():
    limits = AttachmentLimits.from_max_file_mb(5)
    assert limits.max_file_bytes == 5 * MB and limits.max_pdf_pages == AttachmentLimits().max_pdf_pages
    assert AttachmentLimits.from_max_file_mb(1, max_files=7).max_files == 7
    with pytest.raises(ValueError):
        AttachmentLimits(max_member_bytes=0)


def test_missing_file_and_folder(tmp_path):
    with pytest.raises(AttachmentError, match="could not be found"):
        load_attachment(tmp_path / "gone.pdf")
    with pytest.raises(AttachmentError, match="is a folder"):
        load_attachment(tmp_path)


def test_unreadable_file(tmp_path, monkeypatch):
    import builtins
    path = write(tmp_path, "secret.txt", "x")
    real_open = builtins.open

    def denied(file, *args, **kwargs):
        if Path(file) == path:
            raise PermissionError(13, "Permission denied")
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", denied)  # chmod 0 would not stop root
    with pytest.raises(AttachmentError) as err:
        load_attachment(path)
    assert err.value.message == "“secret.txt” could not be read (Permission denied)."


def test_supported_extensions_for_the_upload_widget():
    exts = supported_extensions()
    assert len(exts) == len(set(exts)) and all(e.startswith(".") and e == e.lower() for e in exts)
    for ext in (".pdf", ".png", ".jpg", ".jpeg", ".webp", ".zip", ".tar.gz", ".tgz", ".py", ".md", ".json"):
        assert ext in exts
    assert ".exe" not in exts and "dockerfile" in supported_filenames()


# ---------------------------------------------------------------- sample assets
def test_sample_report_pdf():
    path = ASSETS / "sample_report.pdf"
    assert path.stat().st_size < 200 * 1024
    att = load_attachment(path)
    assert att.meta["pages"] >= 8 and att.notes == []
    assert att.text.startswith(f"=== file: sample_report.pdf ({att.meta['pages']} pages) ===")
    assert "Revenue grew by 31 percent to NOK 412.6 million" in att.text
    page5 = att.text.split("--- page 5 ---")[1].split("--- page 6 ---")[0]
    assert "4. Financial review" in page5 and "Cash at year end" in page5


def test_sample_repo_tarball():
    att = load_attachment(ASSETS / "sample_repo.tar.gz")
    included = [line[10:-4] for line in att.text.splitlines() if line.startswith("=== file: ")]
    assert 8 <= len(included) <= 15 and "tinyledger/tinyledger/parser.py" in included
    assert "def parse_ledger(text: str) -> Ledger:" in att.text
    reasons = {s["path"]: s["reason"] for s in att.meta["skipped"]}
    assert reasons["tinyledger/docs/logo.png"] == "binary"
    assert reasons["tinyledger/web/bundle.js"] == "minified"
    assert {p for p, r in reasons.items() if r == "vendored"} == {
        "tinyledger/node_modules/left-pad/index.js", "tinyledger/node_modules/left-pad/package.json"}


def test_sample_image():
    path = ASSETS / "sample_image.png"
    assert path.stat().st_size < 2 * MB
    att = load_attachment(path)
    assert att.kind == "image" and att.image.size == (3840, 2160) and att.image.mode == "RGB"
    assert att.image.getpixel((10, 10)) == (18, 48, 92)  # the navy title band


def test_make_assets_regenerates_equivalent_files(tmp_path):
    spec = importlib.util.spec_from_file_location("make_assets", ASSETS / "make_assets.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    pdf = write(tmp_path, "sample_report.pdf", module.make_report_pdf())
    repo = write(tmp_path, "sample_repo.tar.gz", module.make_repo_targz())
    # Compare what the loader reads, not bytes (zlib versions may compress differently).
    assert load_attachment(pdf).text == load_attachment(ASSETS / "sample_report.pdf").text
    assert load_attachment(repo).text == load_attachment(ASSETS / "sample_repo.tar.gz").text
