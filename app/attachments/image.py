"""Image uploads -> a loaded RGB PIL image, size-checked from the header before decoding."""
from __future__ import annotations

import io

from .image_header import declared_size
from .model import Attachment, AttachmentError, AttachmentLimits

# Only these decoders may run (PIL would otherwise also try e.g. EPS, which calls Ghostscript).
# "JPEG" also covers multi-picture camera JPEGs, which PIL then reports as MPO.
_PIL_FORMATS = ("PNG", "JPEG", "WEBP", "GIF", "BMP")
_DAMAGED = "“{name}” could not be read as an image; the file looks damaged, truncated or is not an image."


def _too_big(name: str, width: int, height: int, limits: AttachmentLimits) -> AttachmentError:
    return AttachmentError(
        f"“{name}” is {width:,} × {height:,} pixels ({width * height / 1e6:,.1f} megapixels), which is over "
        f"the limit of {limits.max_image_pixels / 1e6:,.1f} megapixels. Please resize it and upload it again."
    )


def load_image(name: str, data: bytes, limits: AttachmentLimits) -> Attachment:
    from PIL import Image, ImageOps

    # 1) The header's claim, read by our own parser: nothing is decoded or allocated yet.
    claimed = declared_size(data)
    if claimed and claimed[0] * claimed[1] > limits.max_image_pixels:
        raise _too_big(name, *claimed, limits)

    notes: list[str] = []
    try:
        img = Image.open(io.BytesIO(data), formats=_PIL_FORMATS)  # lazy: parses the header only
        width, height = img.size
        # 2) PIL's view of the size, still before any pixel is decoded.
        if width * height > limits.max_image_pixels:
            raise _too_big(name, width, height, limits)
        if width == 0 or height == 0:
            raise AttachmentError(_DAMAGED.format(name=name))
        fmt = img.format or "unknown"
        frames = getattr(img, "n_frames", 1)
        if frames > 1:
            img.seek(0)
            notes.append(f"“{name}” is animated ({frames} frames); only the first frame is used.")
        img.load()
        img = _to_rgb(img, notes, name)
        try:
            img = ImageOps.exif_transpose(img)
        except Exception:  # noqa: BLE001 — a broken EXIF block must not lose the image
            pass
    except AttachmentError:
        raise
    except Image.DecompressionBombError as exc:  # PIL's own check (only if our limit is above it)
        size = f"{claimed[0]:,} × {claimed[1]:,} pixels" if claimed else "an enormous pixel size"
        raise AttachmentError(
            f"“{name}” declares {size}, too large to decode safely; it was refused without being decoded."
        ) from exc
    except Exception as exc:  # noqa: BLE001 — PIL raises many types on corrupt input
        raise AttachmentError(_DAMAGED.format(name=name)) from exc

    meta = {"width": img.width, "height": img.height, "format": fmt, "bytes": len(data)}
    return Attachment(kind="image", name=name, image=img, notes=notes, meta=meta)


def _to_rgb(img, notes: list[str], name: str):
    """RGB for the model; transparency is flattened onto white (not black, PIL's default)."""
    from PIL import Image

    if img.mode == "RGB":
        return img
    has_alpha = img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info)
    if not has_alpha:
        return img.convert("RGB")
    rgba = img.convert("RGBA")
    alpha = rgba.getchannel("A")
    if alpha.getextrema()[0] == 255:  # an alpha channel that is fully opaque
        return rgba.convert("RGB")
    background = Image.new("RGB", rgba.size, (255, 255, 255))
    background.paste(rgba, mask=alpha)
    notes.append(f"“{name}” has transparent areas; they are shown on a white background.")
    return background
