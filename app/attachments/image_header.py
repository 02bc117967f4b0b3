"""Declared image dimensions read straight from the file header, without decoding anything.

This runs before PIL sees the file, so an image that *claims* to be huge is refused without
allocating it. Returns None for formats or headers it does not understand; the PIL size check
in image.py remains the second line of defence.
"""
from __future__ import annotations

import struct


def declared_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) as declared by a PNG, GIF, BMP, WebP or JPEG header, else None."""
    try:
        if data.startswith(b"\x89PNG\r\n\x1a\n") and data[12:16] == b"IHDR":
            return struct.unpack(">II", data[16:24])
        if data.startswith((b"GIF87a", b"GIF89a")):
            return struct.unpack("<HH", data[6:10])
        if data.startswith(b"BM"):
            return _bmp(data)
        if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
            return _webp(data)
        if data.startswith(b"\xff\xd8"):
            return _jpeg(data)
    except struct.error:  # header shorter than it claims
        return None
    return None


def _bmp(data: bytes) -> tuple[int, int] | None:
    (header_size,) = struct.unpack("<I", data[14:18])
    if header_size == 12:  # OS/2 BITMAPCOREHEADER
        return struct.unpack("<HH", data[18:22])
    width, height = struct.unpack("<ii", data[18:26])
    return abs(width), abs(height)  # negative height = top-down rows


def _webp(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8X":  # extended: 24-bit (width-1), (height-1)
        w = int.from_bytes(data[24:27], "little") + 1
        h = int.from_bytes(data[27:30], "little") + 1
        return w, h
    if chunk == b"VP8L" and data[20:21] == b"\x2f":  # lossless: 14-bit fields after signature
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 " and data[23:26] == b"\x9d\x01\x2a":  # lossy keyframe
        w, h = struct.unpack("<HH", data[26:30])
        return w & 0x3FFF, h & 0x3FFF
    return None


# SOF markers carry the frame size; C4 (DHT), C8 (JPG ext) and CC (DAC) share the range but don't.
_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


def _jpeg(data: bytes) -> tuple[int, int] | None:
    pos = 2
    while pos + 4 <= len(data):
        if data[pos] != 0xFF:
            return None  # lost sync: not a marker where one must be
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in (0x01, 0xD8) or 0xD0 <= marker <= 0xD7:  # standalone markers
            pos += 2
            continue
        if marker in (0xD9, 0xDA):  # end of image / start of scan before any SOF
            return None
        (length,) = struct.unpack(">H", data[pos + 2 : pos + 4])
        if marker in _SOF:
            height, width = struct.unpack(">HH", data[pos + 5 : pos + 9])
            return width, height
        if length < 2:
            return None
        pos += 2 + length
    return None
