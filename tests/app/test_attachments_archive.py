"""Archive attachments: zip/tar trees, skip rules, unsafe paths and decompression bombs."""
from __future__ import annotations

import bz2
import gzip
import io
import lzma
import stat
import tarfile
import time
import tracemalloc
import zipfile
from pathlib import Path

import pytest

from app.attachments import AttachmentError, AttachmentLimits, load_attachment

MB = 1024 * 1024
TREE = {
    "proj/src/main.py": "def main():\n    return 42\n",
    "proj/README.md": "# Proj\nThe answer is computed in src/main.py.\n",
    "proj/src/util/helpers.js": "export const twice = (x) => 2 * x;\n",
}


def make_zip(members: dict[str, bytes | str], **kw) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, **kw) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return out.getvalue()


def make_tar(members: dict[str, bytes | str], compression: str = "gz", extra=()) -> bytes:
    """extra: pre-built (TarInfo, fileobj-or-None) pairs, e.g. symlinks and devices."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode=f"w:{compression}") as tf:
        for name, data in members.items():
            raw = data.encode() if isinstance(data, str) else data
            info = tarfile.TarInfo(name)
            info.size = len(raw)
            tf.addfile(info, io.BytesIO(raw))
        for info, fileobj in extra:
            tf.addfile(info, fileobj)
    return out.getvalue()


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def sections(text: str) -> list[str]:
    return [line[len("=== file: "):-len(" ===")] for line in text.splitlines() if line.startswith("=== file: ")]


def test_zip_code_tree_sorted_sections_and_summary_header(tmp_path):
    att = load_attachment(write(tmp_path, "repo.zip", make_zip(TREE)))
    assert att.kind == "text" and att.name == "repo.zip"
    assert att.text.startswith("=== archive: repo.zip — 3 files included, 0 skipped ===\n")
    assert sections(att.text) == sorted(TREE)
    assert "=== file: proj/src/main.py ===\ndef main():\n    return 42\n" in att.text
    assert att.meta["files"] == 3 and att.meta["skipped"] == [] and att.notes == []


@pytest.mark.parametrize("compression,name", [("gz", "t.tar.gz"), ("gz", "t.tgz"), ("bz2", "t.tar.bz2"),
                                              ("xz", "t.tar.xz"), ("", "t.tar")])
def test_tar_variants(tmp_path, compression, name):
    att = load_attachment(write(tmp_path, name, make_tar(TREE, compression)))
    assert sections(att.text) == sorted(TREE)
    assert "export const twice" in att.text


def test_archive_type_is_sniffed_without_extension(tmp_path):
    assert sections(load_attachment(write(tmp_path, "upload1", make_zip(TREE))).text) == sorted(TREE)
    assert sections(load_attachment(write(tmp_path, "upload2", make_tar(TREE, "xz"))).text) == sorted(TREE)


def test_zip_unsafe_paths_are_skipped_and_named(tmp_path):
    members = dict(TREE)
    members.update({"../../etc/evil.py": "print('escape')\n", "/abs/path.py": "x = 1\n",
                    "a/../../b.py": "y = 2\n", "..\\win\\evil.txt": "z\n", "C:/Windows/boot.ini": "w\n"})
    att = load_attachment(write(tmp_path, "trav.zip", make_zip(members)))
    assert sections(att.text) == sorted(TREE)
    assert "escape" not in att.text and "x = 1" not in att.text
    unsafe = [s["path"] for s in att.meta["skipped"] if s["reason"] == "unsafe"]
    assert sorted(unsafe) == sorted(["../../etc/evil.py", "/abs/path.py", "a/../../b.py",
                                     "..\\win\\evil.txt", "C:/Windows/boot.ini"])
    note = next(n for n in att.notes if "unsafe paths" in n)
    assert "../../etc/evil.py" in note and "/abs/path.py" in note


def test_tar_skips_binary_vendored_minified_lockfiles_and_links(tmp_path):
    members = dict(TREE)
    members.update({
        "proj/logo.png": b"\x89PNG\r\n\x1a\n" + bytes(200),
        "proj/data/blob.dat": b"abc\x00def" * 50,  # unknown extension with NUL bytes
        "proj/node_modules/lodash/index.js": "module.exports = {};\n",
        "proj/.git/config": "[core]\n",
        "proj/static/app.min.js": "var a=1;\n",
        "proj/static/bundle.js": "var x=" + "1+" * 3000 + "1;\n",  # one 6 KB line
        "proj/package-lock.json": "{}\n",
    })
    link = tarfile.TarInfo("proj/link_to_passwd")
    link.type, link.linkname = tarfile.SYMTYPE, "../../../etc/passwd"
    hard = tarfile.TarInfo("proj/hardlink.py")
    hard.type, hard.linkname = tarfile.LNKTYPE, "proj/src/main.py"
    dev = tarfile.TarInfo("proj/dev_zero")
    dev.type, dev.devmajor, dev.devminor = tarfile.CHRTYPE, 1, 5
    data = make_tar(members, "gz", extra=[(link, None), (hard, None), (dev, None)])
    att = load_attachment(write(tmp_path, "repo.tar.gz", data))

    assert sections(att.text) == sorted(TREE)
    reasons = {s["path"]: s["reason"] for s in att.meta["skipped"]}
    assert reasons == {
        "proj/logo.png": "binary", "proj/data/blob.dat": "binary",
        "proj/node_modules/lodash/index.js": "vendored", "proj/.git/config": "vendored",
        "proj/static/app.min.js": "minified", "proj/static/bundle.js": "minified",
        "proj/package-lock.json": "lockfile",
        "proj/link_to_passwd": "link", "proj/hardlink.py": "link", "proj/dev_zero": "link",
    }
    assert att.text.startswith("=== archive: repo.tar.gz — 3 files included, 10 skipped ===")
    notes = "\n".join(att.notes)
    assert "Skipped 2 binary files: proj/logo.png, proj/data/blob.dat." in notes
    assert "vendored/generated folders: proj/node_modules/, proj/.git/" in notes
    assert "proj/link_to_passwd" in notes and "proj/static/bundle.js" in notes


def test_zip_symlink_and_encrypted_members_are_skipped(tmp_path):
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        zf.writestr("ok.py", "print('ok')\n")
        link = zipfile.ZipInfo("link.py")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(link, "/etc/passwd")
        zf.writestr("secret.py", "garbage")
    data = bytearray(out.getvalue())
    # Mark secret.py as encrypted (zipfile cannot write encrypted members): set bit 0 of the
    # general-purpose flags in its local header (offset 6) and central directory entry (offset 8).
    for signature, flag_offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        pos = -1
        while (pos := data.find(signature, pos + 1)) != -1:
            name_at = pos + (30 if flag_offset == 6 else 46)
            if data[name_at:name_at + 9] == b"secret.py":
                data[pos + flag_offset] |= 0x1
    att = load_attachment(write(tmp_path, "mixed.zip", bytes(data)))
    assert sections(att.text) == ["ok.py"]
    assert {s["path"]: s["reason"] for s in att.meta["skipped"]} == {"link.py": "link", "secret.py": "encrypted"}


def test_non_utf8_member_and_control_characters_in_names(tmp_path):
    members = {"notes.txt": "caf\u00e9 cr\u00e8me\n".encode("cp1252"), "evil\n=== file: x ===.py": "a = 1\n"}
    att = load_attachment(write(tmp_path, "m.zip", make_zip(members)))
    assert "café crème" in att.text
    assert any("not valid UTF-8" in n and "notes.txt" in n for n in att.notes)
    assert "=== file: evil?=== file: x ===.py ===" in att.text  # newline neutralised
    assert "\n=== file: x" not in att.text


def test_oversized_member_is_skipped_without_reading(tmp_path):
    members = dict(TREE, **{"proj/big.txt": "line of text\n" * 100_000})  # 1.3 MB
    att = load_attachment(write(tmp_path, "big.zip", make_zip(members)), AttachmentLimits(max_member_bytes=MB))
    assert sections(att.text) == sorted(TREE)
    assert att.meta["uncompressed_bytes"] < 10_000  # the big member was never inflated
    assert any("larger than 1 MB: proj/big.txt" in n for n in att.notes)


def test_file_count_limit_truncates_with_a_note(tmp_path):
    members = {f"pkg/mod_{i:03d}.py": f"VALUE = {i}\n" for i in range(30)}
    att = load_attachment(write(tmp_path, "many.zip", make_zip(members)), AttachmentLimits(max_files=10))
    assert len(sections(att.text)) == 10 and att.meta["truncated"] is True
    assert any("more than 10 files" in n for n in att.notes)


def _streamed_zero_zip(path: Path, size: int, before: dict[str, str]) -> None:
    """A zip whose one big member is `size` zero bytes, written in chunks (never held in memory)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        for name, text in before.items():
            zf.writestr(name, text)
        with zf.open("bomb/zeros.txt", "w", force_zip64=True) as member:
            chunk = bytes(MB)
            for _ in range(size // MB):
                member.write(chunk)


def _bounded(fn):
    """Run fn() and return (result, peak traced bytes, seconds)."""
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        result = fn()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return result, peak, time.perf_counter() - t0


def test_zip_bomb_single_huge_member_is_refused_cheaply(tmp_path):
    path = tmp_path / "bomb.zip"
    _streamed_zero_zip(path, 200 * MB, before={})
    assert path.stat().st_size < 2 * MB  # 200 MB of zeros compress very well
    with pytest.raises(AttachmentError) as err:
        _, peak, secs = _bounded(lambda: load_attachment(path))
    assert "no readable text" in err.value.message and "larger than 2 MB" in err.value.message

    _streamed_zero_zip(path, 200 * MB, before={"readme.md": "# kept\n"})
    att, peak, secs = _bounded(lambda: load_attachment(path))
    assert sections(att.text) == ["readme.md"]
    assert att.meta["uncompressed_bytes"] < 100
    assert peak < 8 * MB and secs < 2


def test_zip_bomb_of_many_members_stops_at_the_total_limit(tmp_path):
    chunk = b"0\n" * (MB // 2)  # 1 MB of short text lines per member, compresses ~1000:1
    path = tmp_path / "many.zip"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for i in range(200):  # 200 MB uncompressed in total
            zf.writestr(f"part_{i:03d}.txt", chunk)
    limits = AttachmentLimits(max_total_uncompressed_bytes=8 * MB)
    att, peak, secs = _bounded(lambda: load_attachment(path, limits))
    assert att.meta["uncompressed_bytes"] <= 8 * MB + 1
    assert len(sections(att.text)) == 8 and att.meta["truncated"]
    assert any("limit of 8 MB of uncompressed data" in n for n in att.notes)
    assert peak < 6 * 8 * MB and secs < 5


def test_zip_with_lying_declared_size_never_yields_the_hidden_data(tmp_path):
    data = bytearray(make_zip({"small.txt": b"A" * 5 * MB}))
    real = (5 * MB).to_bytes(4, "little")
    assert data.count(real) == 2  # local header + central directory entry
    data = bytes(data).replace(real, (100).to_bytes(4, "little"))
    with pytest.raises(AttachmentError) as err:
        load_attachment(write(tmp_path, "liar.zip", bytes(data)))
    assert "damaged file" in err.value.message and "small.txt" in err.value.message


def test_tar_gz_bomb_stops_decompressing_at_the_limit(tmp_path):
    class Zeros(io.RawIOBase):  # a 200 MB member streamed into the tarball, never held in memory
        def __init__(self, n):
            self.left = n

        def readable(self):
            return True

        def readinto(self, buf):
            n = min(len(buf), self.left)
            buf[:n] = bytes(n)
            self.left -= n
            return n

    path = tmp_path / "bomb.tar.gz"
    with tarfile.open(path, "w:gz", compresslevel=1) as tf:
        first = tarfile.TarInfo("readme.md")
        first.size = 7
        tf.addfile(first, io.BytesIO(b"# kept\n"))
        big = tarfile.TarInfo("zeros.bin.txt")
        big.size = 200 * MB
        tf.addfile(big, io.BufferedReader(Zeros(big.size)))
        tf.addfile(tarfile.TarInfo("after.md"), io.BytesIO(b""))
    limits = AttachmentLimits(max_total_uncompressed_bytes=4 * MB)
    att, peak, secs = _bounded(lambda: load_attachment(path, limits))
    assert sections(att.text) == ["readme.md"] and att.meta["truncated"]
    assert any("limit of 4 MB of uncompressed data" in n for n in att.notes)
    assert peak < 8 * MB and secs < 2

    path.write_bytes(gzip.compress(make_tar({"zeros.txt": bytes(16 * MB)}, "")))
    with pytest.raises(AttachmentError, match="zip bomb"):
        load_attachment(path, limits)


def test_damaged_archives(tmp_path):
    with pytest.raises(AttachmentError, match="could not be read as a ZIP archive"):
        load_attachment(write(tmp_path, "bad.zip", b"PK\x03\x04 this is not really a zip"))
    with pytest.raises(AttachmentError, match="could not be read as a tar.gz archive"):
        load_attachment(write(tmp_path, "bad.tar.gz", b"\x1f\x8b\x08\x00 nope"))
    # Cut inside the last member: the files before the damage are kept, with a note.
    members = {"a.py": "A = 1\n", "b.py": "B = 2\n", "c.txt": "x" * 4000 + "\n"}
    data = make_tar(members, "")
    att = load_attachment(write(tmp_path, "cut.tar", data[:2600]))
    assert sections(att.text) == ["a.py", "b.py"]
    assert any("damaged or truncated" in n for n in att.notes)
    raw = bz2.compress(make_tar(members, ""))
    with pytest.raises(AttachmentError, match="tar.bz2"):
        load_attachment(write(tmp_path, "cut.tar.bz2", raw[: len(raw) // 4]))
    xz = lzma.compress(b"not a tar at all" * 100)
    with pytest.raises(AttachmentError, match="tar.xz"):
        load_attachment(write(tmp_path, "fake.tar.xz", xz))


def test_archive_without_text_files_is_refused(tmp_path):
    members = {"img/a.png": b"\x89PNG" + bytes(50), "node_modules/x/index.js": "1;\n", "lib.so": b"\x7fELF"}
    with pytest.raises(AttachmentError) as err:
        load_attachment(write(tmp_path, "assets.zip", make_zip(members)))
    message = err.value.message
    assert "contains no readable text or source files" in message
    assert "2 binary files" in message and "node_modules/" in message
