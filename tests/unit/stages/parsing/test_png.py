"""PNGs written by stages.parsing.formats.png: MuPDF reads back the very pixels, in every color
type the
parse stage can meet, and images of a PDF are extracted pixel for pixel."""

# mypy: disallow-untyped-calls=False

from __future__ import annotations

import random

import pymupdf
import pytest

from stages.parsing.formats.pdf import iter_pages, open_pdf
from stages.parsing.formats.png import png_of


def _pixmap(colorspace: pymupdf.Colorspace | None, alpha: bool, width: int = 37) -> pymupdf.Pixmap:
    n = (colorspace.n if colorspace else 0) + alpha
    samples = random.Random(n).randbytes(width * 23 * n)
    return pymupdf.Pixmap(colorspace, width, 23, samples, alpha)


@pytest.mark.parametrize(
    ("colorspace", "alpha"),
    [
        (pymupdf.csGRAY, False),
        (pymupdf.csGRAY, True),
        (pymupdf.csRGB, False),
        (pymupdf.csRGB, True),
    ],
)
def test_a_png_holds_the_pixmaps_pixels(colorspace: pymupdf.Colorspace, alpha: bool) -> None:
    """As MuPDF's own PNG of it does (with alpha: MuPDF's, premultiplied pixels go back
    through its own encoder)."""
    pix = _pixmap(colorspace, alpha)
    back = pymupdf.Pixmap(png_of(pix))
    theirs = pymupdf.Pixmap(pix.tobytes("png"))
    assert (back.width, back.height, back.n, back.alpha) == (37, 23, pix.n, pix.alpha)
    assert back.samples == theirs.samples
    if not alpha:
        assert back.samples == pix.samples


def test_a_cmyk_pixmap_is_refused() -> None:
    with pytest.raises(ValueError, match="4 samples"):
        png_of(_pixmap(pymupdf.csCMYK, False))


def test_pdf_images_that_are_not_jpeg_come_out_pixel_for_pixel() -> None:
    """A Flate image (RGB, and gray with a soft mask) is stored as a PNG of exactly what
    MuPDF decodes from the PDF; a JPEG is kept as its own bytes."""
    doc = pymupdf.open()
    page = doc.new_page()
    rgb = _pixmap(pymupdf.csRGB, False, width=140)
    gray = _pixmap(pymupdf.csGRAY, True, width=150)
    jpeg = bytes(_pixmap(pymupdf.csRGB, False, width=160).tobytes("jpeg"))
    for i, stream in enumerate((rgb.tobytes("png"), gray.tobytes("png"), jpeg)):
        page.insert_image(pymupdf.Rect(20 + 180 * i, 72, 180 + 180 * i, 200), stream=stream)
    pdf = open_pdf(bytes(doc.tobytes()), name="images.pdf")
    [(_, images)] = list(iter_pages(pdf, min_image_px=10, min_image_bytes=1))
    assert [(i.ext, i.width) for i in images] == [("png", 140), ("png", 150), ("jpeg", 160)]
    xrefs = [info[0] for info in pdf.get_page_images(0)]
    for image, xref in zip(images[:2], xrefs, strict=False):
        assert pymupdf.Pixmap(image.data).samples == pymupdf.Pixmap(pdf, xref).samples
    assert images[2].data == pdf.extract_image(xrefs[2])["image"]


def test_a_spot_color_image_comes_out_as_mupdfs_own_png_of_it() -> None:
    """A PNG holds gray or RGB: an image in a spot color (Separation) is converted to RGB
    first, as MuPDF's encoder converts it (writing its tints as gray would invert it)."""
    doc = pymupdf.open()
    page = doc.new_page()
    xref = page.insert_image(
        pymupdf.Rect(72, 72, 272, 232), stream=_pixmap(pymupdf.csGRAY, False, 100).tobytes("png")
    )
    spot = "<< /FunctionType 2 /Domain [0 1] /C0 [0 0 0 0] /C1 [0 1 1 0] /N 1 >>"
    doc.xref_set_key(xref, "ColorSpace", f"[/Separation /Spot /DeviceCMYK {spot}]")
    pdf = open_pdf(bytes(doc.tobytes()), name="spot.pdf")
    [(_, images)] = list(iter_pages(pdf, min_image_px=10, min_image_bytes=1))
    ours = pymupdf.Pixmap(images[0].data)
    theirs = pymupdf.Pixmap(pdf.extract_image(pdf.get_page_images(0)[0][0])["image"])
    assert (ours.n, ours.samples) == (3, theirs.samples)
