"""Regenerate the sample assets deterministically (same bytes on every run).

    python assets/make_assets.py

Writes next to this script:
  sample_report.pdf     - 11-page fictional annual report (text extractable by pypdf)
  sample_repo.tar.gz    - toy Python project plus files the attachment loader must skip
  sample_image.png      - 3840x2160 dashboard with a bar chart and readable labels
"""
from __future__ import annotations

import gzip
import io
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import minipdf  # noqa: E402
from report_content import PAGES, TITLE  # noqa: E402
from repo_content import FILES  # noqa: E402

FIXED_MTIME = 1717200000  # 2024-06-01, so archives are byte-identical across runs


# ---------------------------------------------------------------- PDF
def make_report_pdf() -> bytes:
    width, height = minipdf.LETTER
    pages = []
    for number, (heading, blocks) in enumerate(PAGES, start=1):
        page = minipdf.Page()
        page.rect(0, height - 40, width, 40, rgb=(0.05, 0.28, 0.45))
        page.text(72, height - 26, TITLE, size=10, font="F2")
        page.text(72, height - 90, heading, size=18, font="F2")
        y = height - 125
        for block in blocks:
            if isinstance(block, str):
                for line in minipdf.wrap(block, 92):
                    page.text(72, y, line, size=11)
                    y -= 15
                y -= 8
            else:  # a table: monospaced columns, grey header band
                widths = [max(len(row[i]) for row in block) + 3 for i in range(len(block[0]))]
                page.rect(68, y - 4, sum(widths) * 6.0 + 8, 15)
                for row in block:
                    cells = "".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip()
                    page.text(72, y, cells, size=10, font="F3")
                    y -= 14
                y -= 10
        page.text(width / 2 - 20, 40, f"Page {number} of {len(PAGES)}", size=9)
        pages.append(page)
    return minipdf.build_pdf(pages, title=TITLE)


# ---------------------------------------------------------------- tar.gz
def _tiny_png() -> bytes:
    from PIL import Image

    img = Image.new("RGB", (64, 64), (20, 90, 140))
    for i in range(64):
        img.putpixel((i, i), (250, 200, 40))
    out = io.BytesIO()
    img.save(out, format="PNG")
    return out.getvalue()


def make_repo_targz() -> bytes:
    files = {path: text.encode("utf-8") for path, text in FILES.items()}
    # Members the loader must skip, to demonstrate the skip notes:
    files["tinyledger/docs/logo.png"] = _tiny_png()  # binary
    files["tinyledger/node_modules/left-pad/package.json"] = b'{"name": "left-pad", "version": "1.3.0"}\n'
    files["tinyledger/node_modules/left-pad/index.js"] = b"module.exports = function leftPad(s, n) { return s; };\n"
    bundle = "var a=" + ",".join(f"f{i}=function(x){{return x*{i}}}" for i in range(400)) + ";\n"
    files["tinyledger/web/bundle.js"] = bundle.encode()  # minified: one 12 KB line
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(files):
            info = tarfile.TarInfo(path)
            info.size, info.mtime, info.mode = len(files[path]), FIXED_MTIME, 0o644
            info.uname = info.gname = "tinyledger"
            tar.addfile(info, io.BytesIO(files[path]))
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=9, mtime=0, filename="") as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


# ---------------------------------------------------------------- PNG
def make_dashboard_png(size=(3840, 2160)) -> bytes:
    from PIL import Image, ImageDraw, ImageFont

    w, h = size
    img = Image.new("RGB", size, (246, 247, 250))
    draw = ImageDraw.Draw(img)
    font = lambda px: ImageFont.load_default(size=px)  # noqa: E731 — Pillow's bundled font
    navy, teal, amber, grey = (18, 48, 92), (0, 128, 128), (230, 150, 30), (120, 125, 135)

    draw.rectangle([0, 0, w, 180], fill=navy)
    draw.text((80, 45), "Halvorsen Tidal Energy - Operations Dashboard 2024", font=font(84), fill="white")

    # Bar chart: monthly production in GWh.
    months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
    gwh = [14.2, 13.1, 12.4, 11.0, 12.9, 14.8, 15.6, 16.3, 17.9, 20.1, 24.6, 25.5]
    left, top, right, bottom = 160, 320, 2300, 1850
    draw.text((left, 230), "Electricity delivered per month (GWh) - total 198.4 GWh", font=font(56), fill=navy)
    draw.line([left, bottom, right, bottom], fill=grey, width=6)
    draw.line([left, top, left, bottom], fill=grey, width=6)
    for tick in range(0, 31, 5):
        y = bottom - (bottom - top) * tick / 30
        draw.line([left - 20, y, right, y], fill=(220, 222, 228), width=2)
        draw.text((left - 110, y - 24), f"{tick}", font=font(44), fill=grey)
    slot = (right - left) / len(months)
    for i, (month, value) in enumerate(zip(months, gwh)):
        x0 = left + i * slot + slot * 0.18
        x1 = left + (i + 1) * slot - slot * 0.18
        y0 = bottom - (bottom - top) * value / 30
        draw.rectangle([x0, y0, x1, bottom - 3], fill=teal if value < 20 else amber)
        draw.text((x0, y0 - 60), f"{value:.1f}", font=font(42), fill=navy)
        draw.text((x0 + 10, bottom + 20), month, font=font(46), fill=navy)

    # Key-figure cards.
    cards = [("Revenue", "NOK 412.6 m", "+31% vs 2023"), ("EBIT", "NOK 18.9 m", "first positive year"),
             ("Availability", "94.1 %", "HT-2 gearbox campaign"), ("Turbines", "38 / 71.4 MW", "3 arrays")]
    for i, (label, value, sub) in enumerate(cards):
        y = 260 + i * 420
        draw.rounded_rectangle([2500, y, 3720, y + 360], radius=40, fill="white", outline=(210, 214, 222), width=5)
        draw.text((2560, y + 40), label, font=font(54), fill=grey)
        draw.text((2560, y + 120), value, font=font(100), fill=navy)
        draw.text((2560, y + 260), sub, font=font(46), fill=teal)

    # Array map: three circles sized by capacity.
    draw.text((160, 1960), "Arrays:", font=font(56), fill=navy)
    for i, (name, mw) in enumerate([("Sulafjord 26.4 MW", 26.4), ("Breisundet 28.8 MW", 28.8),
                                    ("Pentland West 16.2 MW", 16.2)]):
        cx, r = 650 + i * 900, int(mw * 2.2)
        draw.ellipse([cx - r, 2050 - r, cx + r, 2050 + r], fill=amber if i == 2 else teal)
        draw.text((cx + r + 30, 2020), name, font=font(50), fill=navy)

    out = io.BytesIO()
    img.save(out, format="PNG", optimize=True)
    return out.getvalue()


def main() -> None:
    outputs = {
        "sample_report.pdf": make_report_pdf(),
        "sample_repo.tar.gz": make_repo_targz(),
        "sample_image.png": make_dashboard_png(),
    }
    for name, data in outputs.items():
        (HERE / name).write_bytes(data)
        print(f"wrote {name}: {len(data):,} bytes")


if __name__ == "__main__":
    main()
