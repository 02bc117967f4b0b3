"""Archives (.zip, .tar, .tar.gz/.tgz, .tar.bz2, .tar.xz) of a code tree -> prompt text.

Everything happens in memory; nothing is ever written to disk. Invariants:
- At most limits.max_total_uncompressed_bytes are ever inflated from one archive: members are
  read in bounded chunks and declared sizes are never trusted (for compressed tars the whole
  decompressed stream counts, since skipping a member still means decompressing it).
- At most limits.max_member_bytes + 1 bytes of any single member are held at once.
- Member paths are sanitised; absolute or '..' paths are skipped and reported, never used.
"""
from __future__ import annotations

import bz2
import gzip
import io
import lzma
import stat
import tarfile
import zipfile

from . import formats
from .model import Attachment, AttachmentError, AttachmentLimits, human_size, name_list
from .text import decode, looks_minified, section

_CHUNK = 64 * 1024
_LISTED_FILES = 300  # header lists at most this many included paths


class _Stop(Exception):
    """Reading ends early (a limit was reached); what was collected so far is kept."""


class _StreamBudgetExceeded(Exception):
    pass


class _BoundedStream(io.RawIOBase):
    """Read-only wrapper that refuses to produce more than `budget` bytes in total."""

    def __init__(self, inner, budget: int | None):
        self._inner, self._budget, self.produced = inner, budget, 0

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        n = _CHUNK if n is None or n < 0 else n
        if self._budget is not None:
            n = min(n, self._budget - self.produced + 1)
        data = self._inner.read(n)
        self.produced += len(data)
        if self._budget is not None and self.produced > self._budget:
            raise _StreamBudgetExceeded
        return data


def safe_member_path(raw: str) -> str | None:
    """Normalised relative path, or None if the name is absolute or climbs out with '..'."""
    name = raw.replace("\\", "/")
    if name.startswith("/") or (len(name) > 1 and name[1] == ":" and name[0].isalpha()):
        return None
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        return None
    return _visible("/".join(parts))


def _visible(name: str) -> str:
    """Control characters (e.g. a newline faking a '=== file:' header) become '?'."""
    return "".join(c if c >= " " and c != "\x7f" else "?" for c in name)


class _Collector:
    """Applies the skip rules and limits to members as they stream past."""

    def __init__(self, name: str, limits: AttachmentLimits):
        self.name, self.limits = name, limits
        self.files: dict[str, str] = {}
        self.sizes: dict[str, int] = {}
        self.skipped: list[tuple[str, str]] = []
        self.recoded: list[str] = []  # included files that were not valid UTF-8
        self.consumed = 0  # member bytes read (inflated) so far
        self.stop_note: str | None = None

    def skip(self, path: str, reason: str) -> None:
        self.skipped.append((_visible(path), reason))

    def offer(self, raw_name: str, declared_size: int, opener) -> None:
        """Consider one regular-file member; opener() returns a readable file object."""
        path = safe_member_path(raw_name)
        if path is None:
            return self.skip(raw_name or "(empty name)", "unsafe")
        if path in self.files:
            return self.skip(path, "duplicate")
        reason = formats.member_skip_reason(path)
        if reason:
            return self.skip(path, reason)
        if len(self.files) >= self.limits.max_files:
            self.stop_note = (f"“{self.name}” has more than {self.limits.max_files} files; only the first "
                              f"{self.limits.max_files} were included.")
            raise _Stop
        if declared_size > self.limits.max_member_bytes:  # honest headers let us skip cheaply
            return self.skip(path, "large")
        budget_left = self.limits.max_total_uncompressed_bytes - self.consumed
        cap = min(self.limits.max_member_bytes, budget_left) + 1
        with opener() as fileobj:
            data = _read_capped(fileobj, cap)
        self.consumed += len(data)
        if len(data) > self.limits.max_member_bytes:
            return self.skip(path, "large")
        if len(data) > budget_left:
            self.size_limit_reached()
        decoded = decode(data, lenient=formats.is_text_name(path))
        if decoded is None:
            return self.skip(path, "binary")
        if looks_minified(decoded.text):
            return self.skip(path, "minified")
        self.files[path] = decoded.text
        self.sizes[path] = len(data)
        if decoded.note:
            self.recoded.append(path)

    def size_limit_reached(self) -> None:
        self.stop_note = (f"Stopped reading “{self.name}” at the limit of "
                          f"{human_size(self.limits.max_total_uncompressed_bytes)} of uncompressed data; "
                          "files after that point were not included.")
        raise _Stop


def _read_capped(fileobj, cap: int) -> bytes:
    chunks, got = [], 0
    while got < cap:
        chunk = fileobj.read(min(_CHUNK, cap - got))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _damaged(name: str, what: str) -> AttachmentError:
    return AttachmentError(f"“{name}” could not be read as a {what} archive; the file looks damaged or truncated.")


def _read_zip(data: bytes, col: _Collector) -> None:
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        infos = archive.infolist()
    except Exception as exc:  # noqa: BLE001 — BadZipFile, OSError, ValueError, struct.error...
        raise _damaged(col.name, "ZIP") from exc
    for info in infos:
        name = info.filename or "(empty name)"
        if name.endswith("/"):  # directory entry (ZipInfo.is_dir() fails on an empty name)
            continue
        if stat.S_ISLNK(info.external_attr >> 16):
            col.skip(name, "link")
        elif info.flag_bits & 0x1:
            col.skip(name, "encrypted")
        else:
            try:
                col.offer(info.filename, info.file_size, lambda info=info: archive.open(info))
            except _Stop:
                raise
            except Exception:  # noqa: BLE001 — bad CRC, unsupported method, overlapping entries...
                col.skip(name, "damaged")


_DECOMPRESSORS = {  # streaming decompressors: read(n) never produces more than n bytes
    "gz": lambda raw: gzip.GzipFile(fileobj=raw, mode="rb"),
    "bz2": lambda raw: bz2.BZ2File(raw, mode="rb"),
    "xz": lambda raw: lzma.LZMAFile(raw, mode="rb"),
}


def _read_tar(data: bytes, compression: str, col: _Collector) -> None:
    raw = io.BytesIO(data)
    if compression:
        stream = _BoundedStream(_DECOMPRESSORS[compression](raw), col.limits.max_total_uncompressed_bytes)
    else:
        stream = _BoundedStream(raw, None)  # nothing is inflated; member reads still count
    what = "tar" + (f".{compression}" if compression else "")
    try:
        # "r|": strictly sequential streaming; a member is read before the next header.
        with tarfile.open(fileobj=stream, mode="r|") as archive:
            for member in archive:
                if member.isdir():
                    continue
                if not member.isfile():  # symlink, hardlink, device, fifo
                    col.skip(member.name, "link")
                    continue
                col.offer(member.name, member.size, lambda m=member: archive.extractfile(m))
    except _Stop:
        raise
    except _StreamBudgetExceeded:
        col.size_limit_reached()
    except Exception as exc:  # noqa: BLE001 — ReadError, EOFError, zlib/lzma errors on damaged data
        if not col.files:
            raise _damaged(col.name, what) from exc
        col.stop_note = f"“{col.name}” is damaged or truncated; only the files before the damage were included."


_REASONS = {  # reason -> (singular, plural) phrase for the notes
    "binary": ("binary file", "binary files"),
    "minified": ("minified/generated file", "minified/generated files"),
    "lockfile": ("lockfile", "lockfiles"),
    "unsafe": ("entry with an unsafe path (absolute or '..')", "entries with unsafe paths (absolute or '..')"),
    "link": ("link or special file", "links or special files"),
    "encrypted": ("password-protected file", "password-protected files"),
    "damaged": ("damaged file", "damaged files"),
    "duplicate": ("duplicate entry", "duplicate entries"),
}


def _skip_notes(col: _Collector) -> list[str]:
    by_reason: dict[str, list[str]] = {}
    for path, reason in col.skipped:
        by_reason.setdefault(reason, []).append(path)
    notes = []
    for reason, paths in by_reason.items():
        count = len(paths)
        if reason == "vendored":
            dirs = list(dict.fromkeys(formats.vendored_dir(p) for p in paths))
            what = "file" if count == 1 else "files"
            notes.append(f"Skipped {count} {what} in vendored/generated folders: {name_list(dirs)}.")
        elif reason == "large":
            what = "file" if count == 1 else "files"
            limit = human_size(col.limits.max_member_bytes)
            notes.append(f"Skipped {count} {what} larger than {limit}: {name_list(paths)}.")
        else:
            one, many = _REASONS[reason]
            notes.append(f"Skipped {count} {one if count == 1 else many}: {name_list(paths)}.")
    if col.recoded:
        notes.append(f"{len(col.recoded)} included file(s) were not valid UTF-8 and were read as Latin-1 "
                     f"(some characters may be wrong): {name_list(col.recoded)}.")
    return notes


def load_archive(name: str, data: bytes, kind: str, limits: AttachmentLimits) -> Attachment:
    """kind: 'zip' or 'tar:<compression>' (compression '', 'gz', 'bz2' or 'xz')."""
    col = _Collector(name, limits)
    try:
        if kind == "zip":
            _read_zip(data, col)
        else:
            _read_tar(data, kind.partition(":")[2], col)
    except _Stop:
        pass
    notes = _skip_notes(col)
    if col.stop_note:
        notes.insert(0, col.stop_note)
    if not any(text.strip() for text in col.files.values()):
        if col.stop_note and col.stop_note.startswith("Stopped"):
            raise AttachmentError(
                f"“{name}” expands to more than {human_size(limits.max_total_uncompressed_bytes)} "
                "before any readable text file; it was refused (it may be a “zip bomb”)."
            )
        detail = f" ({'; '.join(n.rstrip('.') for n in notes)})" if notes else ""
        raise AttachmentError(f"“{name}” contains no readable text or source files{detail}.")

    paths = sorted(col.files)
    header = [f"=== archive: {name} — {len(paths)} files included, {len(col.skipped)} skipped ==="]
    header += [f"  {p} ({human_size(col.sizes[p])})" for p in paths[:_LISTED_FILES]]
    if len(paths) > _LISTED_FILES:
        header.append(f"  … and {len(paths) - _LISTED_FILES} more")
    body = [section(p, col.files[p]) for p in paths]
    text = "\n".join(header) + "\n\n" + "\n".join(body)
    meta = {
        "files": len(paths),
        "skipped": [{"path": p, "reason": r} for p, r in col.skipped],
        "uncompressed_bytes": col.consumed,
        "truncated": col.stop_note is not None,
    }
    return Attachment(kind="text", name=name, text=text, notes=notes, meta=meta)
