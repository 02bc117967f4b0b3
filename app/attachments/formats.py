"""Which file is what: extension tables, magic-byte sniffing, and skip rules for archive members."""
from __future__ import annotations

PDF_EXTS = (".pdf",)
IMAGE_EXTS = (".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp")
# Longest suffixes first so ".tar.gz" wins over ".gz".
ARCHIVE_EXTS = {
    ".tar.gz": "tar:gz", ".tgz": "tar:gz",
    ".tar.bz2": "tar:bz2", ".tbz2": "tar:bz2", ".tbz": "tar:bz2",
    ".tar.xz": "tar:xz", ".txz": "tar:xz",
    ".tar": "tar:", ".zip": "zip",
}

TEXT_EXTS = frozenset("""
py pyi pyx ipynb js mjs cjs ts tsx jsx vue svelte c cc cpp cxx h hh hpp hxx m mm java go rs rb php
swift kt kts scala sc cs fs fsx vb dart lua pl pm r jl ex exs erl hrl hs elm clj cljs groovy gradle
zig nim v sol asm s cmake mk md markdown rst txt text adoc org tex bib log json jsonl json5 yaml
yml toml ini cfg conf properties env lock html htm xhtml css scss sass less svg sh bash zsh fish
ps1 bat cmd sql graphql gql proto thrift xml xsd xsl csv tsv tf hcl nix dockerfile gitignore
gitattributes dockerignore editorconfig patch diff
""".split())

# Extension-less or dot files recognised by their whole name (lower case).
TEXT_FILENAMES = frozenset("""
dockerfile containerfile makefile gnumakefile rakefile gemfile procfile vagrantfile jenkinsfile
brewfile podfile justfile license licence copying notice authors contributors changelog readme
todo build workspace .gitignore .gitattributes .dockerignore .editorconfig .env .npmrc .babelrc
.prettierrc .eslintrc .flake8 .pylintrc
""".split())

# Never text: skipped in archives without reading, refused as single uploads.
BINARY_EXTS = frozenset("""
png jpg jpeg gif bmp webp ico icns tif tiff psd heic avif so dll dylib exe bin o a obj lib class
jar war ear pyc pyo pyd whl egg zip tar gz tgz bz2 xz 7z rar zst lz4 pdf doc docx xls xlsx ppt pptx
odt ods odp epub mp3 mp4 m4a wav ogg flac aac avi mov mkv webm ttf otf woff woff2 eot sqlite
sqlite3 db npy npz pkl pickle pt pth safetensors onnx h5 hdf5 ckpt gguf parquet feather arrow
iso dmg img wasm
""".split())

OFFICE_HINT = {
    "doc": "Word", "docx": "Word", "odt": "Word", "xls": "Excel", "xlsx": "Excel",
    "ods": "Excel", "ppt": "PowerPoint", "pptx": "PowerPoint", "odp": "PowerPoint",
}

# Directory names whose contents are vendored, generated or tool state.
SKIP_DIRS = frozenset("""
node_modules .git .hg .svn vendor dist build __pycache__ .venv venv target .tox .nox .mypy_cache
.pytest_cache .ruff_cache .idea .next .nuxt bower_components site-packages .gradle .cache
__macosx .eggs .terraform
""".split())

LOCKFILES = frozenset("""
package-lock.json yarn.lock pnpm-lock.yaml poetry.lock cargo.lock gemfile.lock composer.lock
uv.lock pipfile.lock go.sum bun.lockb npm-shrinkwrap.json
""".split())


def extension(name: str) -> str:
    """Last extension without the dot, lower case ('' if none; '.bashrc' has none)."""
    base = name.rsplit("/", 1)[-1].lower()
    stem, dot, ext = base.rpartition(".")
    return ext if dot and stem else ""


def archive_type(name: str) -> str | None:
    """'zip', 'tar:gz', 'tar:bz2', 'tar:xz', 'tar:' or None, from the file name."""
    lower = name.lower()
    for suffix, kind in ARCHIVE_EXTS.items():
        if lower.endswith(suffix):
            return kind
    return None


def is_text_name(name: str) -> bool:
    base = name.rsplit("/", 1)[-1].lower()
    return extension(base) in TEXT_EXTS or base in TEXT_FILENAMES


def classify(name: str, head: bytes) -> str:
    """Route a single upload: 'pdf', 'image', 'zip', 'tar:*', 'text', 'binary' or 'unknown'.

    A known extension decides; only unknown or missing extensions are sniffed.
    """
    ext = extension(name)
    if ext in ("pdf",):
        return "pdf"
    if "." + ext in IMAGE_EXTS:
        return "image"
    kind = archive_type(name)
    if kind:
        return kind
    if is_text_name(name):
        return "text"
    if ext in BINARY_EXTS:  # e.g. .docx is a zip inside, but must not be read as one
        return "binary"
    return sniff(head) or "unknown"


def sniff(head: bytes) -> str | None:
    """Recognise a format from its magic bytes (used only when the extension is unknown)."""
    if head.startswith(b"%PDF-"):
        return "pdf"
    if head.startswith((b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF87a", b"GIF89a")):
        return "image"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image"
    if head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
        return "zip"
    if head.startswith(b"\x1f\x8b"):
        return "tar:gz"
    if head.startswith(b"BZh"):
        return "tar:bz2"
    if head.startswith(b"\xfd7zXZ\x00"):
        return "tar:xz"
    if head[257:262] == b"ustar":
        return "tar:"
    return None


def member_skip_reason(path: str) -> str | None:
    """Why an archive member is skipped from its (already safe) path alone, or None."""
    parts = path.lower().split("/")
    if any(part in SKIP_DIRS for part in parts[:-1]):
        return "vendored"
    base = parts[-1]
    if base == ".ds_store" or base.startswith("._"):
        return "vendored"  # macOS metadata
    if base in LOCKFILES:
        return "lockfile"
    if base.endswith((".min.js", ".min.mjs", ".min.css", ".js.map", ".css.map")):
        return "minified"
    if extension(base) in BINARY_EXTS:
        return "binary"
    return None


def vendored_dir(path: str) -> str:
    """The first skipped directory of a vendored member, e.g. 'node_modules/'."""
    parts = path.split("/")
    for i, part in enumerate(parts[:-1]):
        if part.lower() in SKIP_DIRS:
            return "/".join(parts[: i + 1]) + "/"
    return parts[-1]


def supported_extensions() -> list[str]:
    """Dotted, lower-case extensions for an upload widget (names like Dockerfile: supported_filenames)."""
    exts = list(PDF_EXTS) + list(IMAGE_EXTS) + list(ARCHIVE_EXTS)
    exts += sorted("." + e for e in TEXT_EXTS if "." + e not in exts)
    return exts


def supported_filenames() -> list[str]:
    return sorted(TEXT_FILENAMES)
