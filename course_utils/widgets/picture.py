"""The picture inside every widget: a matplotlib figure shown sharp, at the size it was drawn.

A widget draws a figure, then ``Picture.show(fig)`` turns it into a PNG with ``PIXEL_RATIO``
pixels per screen pixel and displays it at ``DISPLAY_DPI`` screen pixels per inch of figure (the
size matplotlib's inline figures have). The image never stretches to the width of the output
area, which is what blurs a PNG; on a narrower screen it shrinks, which keeps it sharp.
``Picture.fail(message)`` hides the picture and shows the message, so an error never sits on top
of a stale picture.
"""
from __future__ import annotations

import html
import struct

DISPLAY_DPI = 100   # screen pixels per inch of figure, as in the notebook's own figures
PIXEL_RATIO = 2     # PNG pixels per screen pixel: sharp on high-density screens as well


def figure_png(fig, dpi: float) -> bytes:
    """The figure as PNG bytes, cropped to what is drawn."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight", pad_inches=0.08)
    return buf.getvalue()


def png_size(png: bytes) -> tuple[int, int]:
    """(width, height) in pixels, read from the PNG header."""
    if png[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    return struct.unpack(">II", png[16:24])


def error_html(exc_or_text) -> str:
    """A red one-line message: ``KeyError: 'xyzzy' is not …`` or the text given."""
    if isinstance(exc_or_text, BaseException):
        detail = str(exc_or_text.args[0]) if isinstance(exc_or_text, KeyError) and exc_or_text.args \
            else str(exc_or_text)
        text = f"{type(exc_or_text).__name__}: {detail}"
    else:
        text = str(exc_or_text)
    return f"<span style='color:#b00'>{html.escape(text)}</span>"


class Picture:
    """An ``ipywidgets.Image`` (``.image``) and a message line (``.message``) above it."""

    def __init__(self):
        import ipywidgets as W

        self.image = W.Image(format="png", layout=W.Layout(max_width="100%", height="auto"))
        self.image.add_class("course-picture")
        self.message = W.HTML()
        self.png: bytes = b""

    def show(self, fig, close: bool = True) -> bytes:
        """Draw ``fig`` into the image (and close it); clear any message. Returns the PNG."""
        png = figure_png(fig, DISPLAY_DPI * PIXEL_RATIO)
        if close:
            import matplotlib.pyplot as plt

            plt.close(fig)
        width, _ = png_size(png)
        self.png = png
        self.image.value = png
        self.image.layout.width = f"{round(width / PIXEL_RATIO)}px"
        self.image.layout.display = None
        self.message.value = ""
        return png

    def fail(self, exc_or_text) -> None:
        """Hide the picture and say why."""
        self.image.layout.display = "none"
        self.message.value = error_html(exc_or_text)

    def note(self, text_html: str) -> None:
        """A message that does not hide the picture (e.g. "not written yet" with a fallback)."""
        self.message.value = text_html
