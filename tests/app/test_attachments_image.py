"""Image attachments: header-first size checks, corrupt files, RGB conversion."""
from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import pytest
from PIL import Image

from app.attachments import AttachmentError, AttachmentLimits, load_attachment
from app.attachments.image_header import declared_size


def encode(img: Image.Image, fmt: str, **kw) -> bytes:
    out = io.BytesIO()
    img.save(out, format=fmt, **kw)
    return out.getvalue()


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def png_claiming(width: int, height: int) -> bytes:
    """A tiny real PNG whose IHDR is patched (CRC fixed) to declare width x height pixels."""
    data = bytearray(encode(Image.new("RGB", (8, 8), (10, 20, 30)), "PNG"))
    assert data[12:16] == b"IHDR"
    data[16:24] = struct.pack(">II", width, height)
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])))
    return bytes(data)


@pytest.fixture
def forbid_pil(monkeypatch):
    """Call the returned function (after building test data) to make any PIL open/decode fail."""
    from PIL import ImageFile

    def boom(*args, **kwargs):
        raise AssertionError("PIL must not touch this image")

    def arm():
        monkeypatch.setattr(Image, "open", boom)
        monkeypatch.setattr(Image.Image, "load", boom)
        monkeypatch.setattr(ImageFile.ImageFile, "load", boom)
    return arm


def test_png_loads_as_rgb_with_meta(tmp_path):
    img = Image.new("RGB", (320, 200), (200, 30, 30))
    att = load_attachment(write(tmp_path, "red.png", encode(img, "PNG")))
    assert att.kind == "image" and att.text == "" and att.name == "red.png"
    assert att.image.mode == "RGB" and att.image.size == (320, 200)
    assert att.image.getpixel((5, 5)) == (200, 30, 30)
    assert att.meta["width"] == 320 and att.meta["height"] == 200 and att.meta["format"] == "PNG"


@pytest.mark.parametrize("fmt,ext,kw", [("JPEG", "jpg", {}), ("WEBP", "webp", {"lossless": True}),
                                        ("WEBP", "webp", {"quality": 70}), ("GIF", "gif", {}),
                                        ("BMP", "bmp", {}), ("PNG", "png", {})])
def test_every_format_loads_and_its_header_is_parsed(tmp_path, fmt, ext, kw):
    img = Image.new("RGB", (123, 45), (0, 90, 200))
    data = encode(img, fmt, **kw)
    assert declared_size(data) == (123, 45)
    att = load_attachment(write(tmp_path, f"pic.{ext}", data))
    assert att.image.size == (123, 45) and att.image.mode == "RGB"


def test_webp_extended_header_is_parsed():
    img = Image.new("RGBA", (300, 77), (0, 90, 200, 128))  # alpha forces the VP8X chunk
    data = encode(img, "WEBP", quality=80)
    assert data[12:16] == b"VP8X" and declared_size(data) == (300, 77)


def test_huge_declared_png_is_refused_before_decoding(tmp_path, forbid_pil):
    path = write(tmp_path, "huge.png", png_claiming(20000, 20000))
    forbid_pil()
    assert path.stat().st_size < 200  # the file is tiny; only its header claims 400 megapixels
    with pytest.raises(AttachmentError) as err:
        load_attachment(path)
    message = err.value.message
    assert "20,000 × 20,000 pixels" in message and "400.0 megapixels" in message
    assert "limit of 64.0 megapixels" in message


def test_pil_decompression_bomb_error_is_caught_with_dimensions(tmp_path):
    # With our own limit disabled, PIL's bomb check (2x its MAX_IMAGE_PIXELS) must still be
    # turned into a clean AttachmentError, still without decoding.
    limits = AttachmentLimits(max_image_pixels=10**12)
    with pytest.raises(AttachmentError) as err:
        load_attachment(write(tmp_path, "huge.png", png_claiming(20000, 20000)), limits)
    assert "20,000 × 20,000 pixels" in err.value.message and "without being decoded" in err.value.message


def test_limit_applies_to_real_jpeg_before_decoding(tmp_path, forbid_pil):
    data = encode(Image.new("RGB", (400, 300), (1, 2, 3)), "JPEG")
    forbid_pil()
    with pytest.raises(AttachmentError, match="400 × 300 pixels"):
        load_attachment(write(tmp_path, "photo.jpeg", data), AttachmentLimits(max_image_pixels=100_000))


def test_pil_size_check_backs_up_the_header_parser(tmp_path, monkeypatch):
    import app.attachments.image as image_module

    from PIL import ImageFile

    data = encode(Image.new("RGB", (400, 300)), "PNG")
    monkeypatch.setattr(image_module, "declared_size", lambda data: None)  # parser "doesn't know"
    loaded = []
    monkeypatch.setattr(ImageFile.ImageFile, "load", lambda self: loaded.append(self))
    with pytest.raises(AttachmentError, match="400 × 300 pixels"):
        load_attachment(write(tmp_path, "p.png", data), AttachmentLimits(max_image_pixels=100_000))
    assert loaded == []


@pytest.mark.parametrize("name,data", [
    ("noise.png", bytes(range(256)) * 4),
    ("truncated.png", encode(Image.effect_noise((200, 200), 40).convert("RGB"), "PNG")[:600]),
    ("truncated.jpg", encode(Image.effect_noise((200, 200), 40).convert("RGB"), "JPEG")[:700]),
    ("header-only.gif", b"GIF89a\x10\x00\x10\x00"),
    ("zero.png", png_claiming(0, 10)),
    ("really-a-tiff.png", encode(Image.new("RGB", (9, 9)), "TIFF")),  # only the supported decoders run
])
def test_corrupt_images_give_a_clear_error(tmp_path, name, data):
    with pytest.raises(AttachmentError) as err:
        load_attachment(write(tmp_path, name, data))
    assert "could not be read as an image" in err.value.message and name in err.value.message


def test_transparency_is_flattened_onto_white(tmp_path):
    img = Image.new("RGBA", (10, 10), (0, 0, 0, 0))
    img.putpixel((0, 0), (0, 0, 255, 255))
    att = load_attachment(write(tmp_path, "logo.png", encode(img, "PNG")))
    assert att.image.mode == "RGB"
    assert att.image.getpixel((5, 5)) == (255, 255, 255) and att.image.getpixel((0, 0)) == (0, 0, 255)
    assert any("transparent" in n for n in att.notes)

    opaque = Image.new("RGBA", (4, 4), (9, 9, 9, 255))
    att = load_attachment(write(tmp_path, "opaque.png", encode(opaque, "PNG")))
    assert att.image.getpixel((1, 1)) == (9, 9, 9) and att.notes == []


def test_animated_gif_uses_first_frame_with_note(tmp_path):
    frames = [Image.new("RGB", (20, 20), c) for c in ((255, 0, 0), (0, 255, 0), (0, 0, 255))]
    data = encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=100)
    att = load_attachment(write(tmp_path, "anim.gif", data))
    assert att.image.getpixel((3, 3)) == (255, 0, 0)
    assert any("3 frames" in n for n in att.notes)


def test_image_without_extension_is_sniffed(tmp_path):
    att = load_attachment(write(tmp_path, "clipboard", encode(Image.new("RGB", (7, 9)), "PNG")))
    assert att.kind == "image" and att.image.size == (7, 9)
