"""Damaged input of every kind must end in AttachmentError (or a result), never another exception."""
from __future__ import annotations

import importlib.util
import io
import random
import tarfile
import warnings
import zipfile
from pathlib import Path

from PIL import Image

from app.attachments import AttachmentError, load_attachment

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("minipdf", ROOT / "assets" / "minipdf.py")
minipdf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(minipdf)


def seeds() -> dict[str, bytes]:
    found = {"report.pdf": minipdf.text_pdf(["First page words.", "Second page words."]),
             "repo.tar.gz": (ROOT / "assets" / "sample_repo.tar.gz").read_bytes()}
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("pkg/mod.py", "print(1)\n" * 40)
        zf.writestr("README.md", "# hi\n" * 20)
    found["code.zip"] = out.getvalue()
    for compression in ("", "bz2", "xz"):
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode=f"w:{compression}") as tf:
            for name in ("a.py", "b.txt"):
                info = tarfile.TarInfo(name)
                info.size = 240
                tf.addfile(info, io.BytesIO(b"hello world\n" * 20))
        found["code.tar" + (f".{compression}" if compression else "")] = out.getvalue()
    noise = Image.effect_noise((48, 32), 30).convert("RGB")
    for fmt, ext in (("PNG", "png"), ("JPEG", "jpg"), ("GIF", "gif"), ("BMP", "bmp"), ("WEBP", "webp")):
        out = io.BytesIO()
        noise.save(out, format=fmt)
        found[f"pic.{ext}"] = out.getvalue()
    return found


def mutate(rng: random.Random, data: bytes) -> bytes:
    data = bytearray(data)
    op = rng.randrange(4)
    if op == 0:  # flip a few bytes
        for _ in range(rng.randint(1, 20)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    elif op == 1:  # truncate
        data = data[: rng.randrange(1, len(data))]
    elif op == 2:  # overwrite a run with noise
        start = rng.randrange(len(data))
        data[start:start + rng.randint(1, 200)] = rng.randbytes(rng.randint(1, 200))
    else:  # insert noise
        start = rng.randrange(len(data))
        data[start:start] = rng.randbytes(rng.randint(1, 50))
    return bytes(data)


def test_mutated_files_only_ever_raise_attachment_error(tmp_path):
    rng = random.Random(20240601)
    path = tmp_path / "upload"
    outcomes = {"ok": 0, "error": 0}
    for name, original in sorted(seeds().items()):
        for _ in range(30):
            path.write_bytes(mutate(rng, original))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # PIL/pypdf may warn about oddities; that is fine
                try:
                    load_attachment(path, name=name)
                    outcomes["ok"] += 1
                except AttachmentError as err:
                    assert err.message and name in err.message
                    outcomes["error"] += 1
    assert outcomes["ok"] > 20 and outcomes["error"] > 20  # both paths were exercised


def test_zip_member_with_empty_name_is_skipped(tmp_path):
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        zf.writestr("ok.py", "A = 1\n")
        zf.writestr("ab", "hidden\n")
    data = bytearray(out.getvalue())
    central = data.rfind(b"PK\x01\x02")  # the last central directory entry is "ab"
    assert data[central + 46:central + 48] == b"ab"
    data[central + 28:central + 32] = (0).to_bytes(2, "little") + (2).to_bytes(2, "little")  # name -> extra
    path = tmp_path / "noname.zip"
    path.write_bytes(bytes(data))
    att = load_attachment(path)
    assert "=== file: ok.py ===" in att.text and "hidden" not in att.text
    assert att.meta["skipped"] == [{"path": "(empty name)", "reason": "unsafe"}]
