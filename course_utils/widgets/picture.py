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

DISPLAY_DPI = 100  # screen pixels per inch of figure, as in the notebook's own figures
PIXEL_RATIO = 2  # PNG pixels per screen pixel: sharp on high-density screens as well


_RENDERERS: dict = {}  # (width, height, dpi) -> a renderer kept for the next picture of that size
_GLYPHS: dict = {}  # one rasterised glyph per font, size, glyph, angle and subpixel offset


def _renderer_class():
    """An Agg renderer that rasterises each glyph once and then copies it: text is most of the
    time a redraw takes, and a widget redraws the same tick labels, titles and digits again
    and again. The pixels are those of matplotlib's own renderer (a glyph's bitmap depends
    only on its subpixel offset, which is part of the key); where this matplotlib draws text
    differently (before 3.10), it is matplotlib's own renderer unchanged."""
    import math

    import numpy as np
    from matplotlib.backends import backend_agg

    base = backend_agg.RendererAgg
    if not hasattr(base, "_draw_text_glyphs_and_boxes"):
        return base
    try:
        from matplotlib.ft2font import FT2Font, RenderMode
    except ImportError:
        return base
    if not hasattr(FT2Font, "_layout"):
        return base

    class GlyphCachingRenderer(base):
        def draw_text(self, gc, x, y, s, prop, angle, ismath=False, mtext=None):
            if ismath:
                return super().draw_text(gc, x, y, s, prop, angle, ismath, mtext)
            features = getattr(mtext, "get_fontfeatures", lambda: None)()
            language = getattr(mtext, "get_language", lambda: None)()
            flags = backend_agg.get_hinting_flag()
            size = prop.get_size_in_points()
            key = (
                "layout",
                s,
                hash(prop),
                size,
                self.dpi,
                flags,
                tuple(features) if features is not None else None,
                language,
            )
            items = _GLYPHS.get(key)
            if items is None:  # the string shaped into glyphs (fonts, ids, offsets): once
                font = self._prepare_font(prop)
                items = _GLYPHS[key] = [
                    (item.ft_object, size, item.glyph_index, 0, 1, item.x, item.y)
                    for item in font._layout(s, flags=flags, features=features, language=language)
                ]
            self._draw_text_glyphs_and_boxes(gc, x, y, angle, items, [])

        def _draw_text_glyphs_and_boxes(self, gc, x, y, angle, glyphs, boxes):
            cos, sin = math.cos(math.radians(angle)), math.sin(math.radians(angle))
            flags = backend_agg.get_hinting_flag()
            aa = bool(gc.get_antialiased())
            height = self.height
            for font, size, glyph, slant, extend, dx, dy in glyphs:  # dy is upwards
                # the glyph's origin in FreeType's 26.6 fixed point, y upwards: its whole
                # pixels only move the bitmap, its 1/64ths shape it
                ox = round(0x40 * (x + dx * cos - dy * sin))
                oy = round(0x40 * (height - y + dx * sin + dy * cos))
                key = (font.fname, size, self.dpi, glyph, slant, extend, angle, ox & 63, oy & 63, aa, flags)
                hit = _GLYPHS.get(key)
                if hit is None:
                    font.set_size(size, self.dpi)
                    font._set_transform(
                        (0x10000 * np.array([[cos, -sin], [sin, cos]]) @ [[extend, extend * slant], [0, 1]])
                        .round()
                        .astype(int),
                        [ox & 63, oy & 63],
                    )
                    bitmap = font._render_glyph(glyph, flags, RenderMode.NORMAL if aa else RenderMode.MONO)
                    buffer = np.array(bitmap.buffer)
                    if not aa:
                        buffer *= 0xFF
                    if len(_GLYPHS) > 20_000:  # a few KB each
                        _GLYPHS.clear()
                    hit = _GLYPHS[key] = (buffer, bitmap.left, bitmap.top)
                buffer, left, top = hit
                # draw_text_image's y is downwards and the bitmap's bottom side
                self._renderer.draw_text_image(
                    buffer, left + (ox >> 6), int(height) - (top + (oy >> 6)) + buffer.shape[0], 0, gc
                )
            boxes = list(boxes)
            if boxes:  # mathtext's rules: matplotlib's own code
                super()._draw_text_glyphs_and_boxes(gc, x, y, angle, (), boxes)

    return GlyphCachingRenderer


def _renderer(width: int, height: int, dpi: float):
    key = (width, height, dpi)
    renderer = _RENDERERS.get(key)
    if renderer is None:
        if len(_RENDERERS) >= 3:  # each holds its pixels: a few MB
            _RENDERERS.clear()
        renderer = _RENDERERS[key] = _renderer_class()(width, height, dpi)
    renderer.clear()
    return renderer


def _background(fig):
    import numpy as np
    from matplotlib.colors import to_rgba

    return np.array([round(255 * c) for c in to_rgba(fig.get_facecolor())], np.uint8).view(np.uint32)[0]


def _ink_on_edge(pixels, fig) -> bool:
    """Whether anything is drawn on the outermost pixels: then something may stick out."""
    import numpy as np

    flat = pixels.view(np.uint32)[..., 0]
    bg = _background(fig)
    return bool(
        (flat[0] != bg).any()
        or (flat[-1] != bg).any()
        or (flat[:, 0] != bg).any()
        or (flat[:, -1] != bg).any()
    )


def _make_room(fig, renderer, pad_inches: float) -> bool:
    """Grow ``fig`` so that every artist's extent fits inside it (long tick labels left of a
    heatmap, a legend above its axes), moving the axes so that they keep their size: what
    ``savefig(bbox_inches="tight")`` does for one picture, done to the figure itself, so the
    next redraw of a kept figure fits at once. Returns whether it grew."""
    box = fig.get_tightbbox(renderer)  # inches, the figure's own frame
    w, h = fig.get_size_inches()
    left, bottom = max(0.0, pad_inches - box.x0), max(0.0, pad_inches - box.y0)
    right, top = max(0.0, box.x1 + pad_inches - w), max(0.0, box.y1 + pad_inches - h)
    if max(left, bottom, right, top) <= 1e-3:
        return False
    new_w, new_h = w + left + right, h + bottom + top
    for ax in fig.axes:
        p = ax.get_position()
        ax.set_position(
            (
                (p.x0 * w + left) / new_w,
                (p.y0 * h + bottom) / new_h,
                p.width * w / new_w,
                p.height * h / new_h,
            )
        )
    fig.set_size_inches(new_w, new_h, forward=False)
    return True


def _draw_order(fig, artists) -> list:
    """``artists`` in the order a full ``fig.draw`` draws them: the figure's children by zorder
    (axes in the order they were added), then, inside an Axes, its children by zorder."""
    top = sorted(fig.get_children(), key=lambda a: a.get_zorder())
    rank = {id(a): i for i, a in enumerate(top)}

    def key(artist):
        if id(artist) in rank:
            return (rank[id(artist)], -1.0, 0)
        ax = artist.axes
        children = ax.get_children()
        inside = next((i for i, c in enumerate(children) if c is artist), len(children))
        return (rank.get(id(ax), len(top)), artist.get_zorder(), inside)

    return sorted(artists, key=key)


def _drawn_pixels(fig, dpi: float, pad_inches: float, dynamic, static_key):
    """(pixels, width, height) of ``fig`` drawn at ``dpi``. Without ``dynamic``: one full draw.
    With it: the rest of the figure (its static part) is drawn once and kept on the figure, and
    each later call with the same ``dynamic`` artists and ``static_key`` restores those pixels
    and draws only the dynamic artists on top, in the order a full draw would."""
    import numpy as np
    from matplotlib.transforms import Bbox

    width, height = (int(round(v)) for v in fig.bbox.size)
    renderer = _renderer(width, height, dpi)
    if not dynamic:
        fig.draw(renderer)
        return np.asarray(renderer.buffer_rgba()), width, height
    key = (dpi, width, height, static_key)
    kept = getattr(fig, "_course_static", None)  # (key, the dynamic artists, pixels, order)
    if (
        kept is None
        or kept[0] != key
        or len(kept[1]) != len(dynamic)
        or any(a is not b for a, b in zip(kept[1], dynamic))
    ):
        was = [a.get_animated() for a in dynamic]
        try:
            for a in dynamic:
                a.set_animated(True)  # left out of fig.draw: the static part only
            fig.draw(renderer)
        finally:
            for a, animated in zip(dynamic, was):
                a.set_animated(animated)
        # every pixel of the renderer (fig.bbox may end a fraction of a pixel short of it)
        whole = Bbox.from_bounds(0, 0, width, height)
        kept = fig._course_static = (key, dynamic, renderer.copy_from_bbox(whole), _draw_order(fig, dynamic))
    else:
        renderer.restore_region(kept[2])
    for artist in kept[3]:
        artist.draw(renderer)
    return np.asarray(renderer.buffer_rgba()), width, height


def figure_png(fig, dpi: float, pad_inches: float = 0.08, dynamic=(), static_key=None) -> bytes:
    """The figure as PNG bytes at ``dpi``, cropped to what is drawn plus ``pad_inches``.

    The same pixels as ``fig.savefig(..., bbox_inches="tight")`` at well under half its cost:
    the figure is drawn once (savefig draws it twice, once to find the box), by a renderer
    kept for the next figure of the same size (matplotlib's caches of text sizes are per
    renderer) that shapes each string and rasterises each glyph once; the crop is the box
    around every pixel that is not background, and the PNG is written by ``encode_png``
    (unfiltered rows, zlib level 1: a little larger, several times faster to write) without
    an alpha channel where the figure is opaque. Where something sticks out of the figure
    (ink on its edge), the figure first grows to hold it (``_make_room``), as savefig's box
    would.

    ``dynamic``: the artists a widget changes between redraws of a kept figure (a frame, a
    line, a whole small Axes). The rest of the figure is drawn once and its pixels kept; a
    redraw with the same ``dynamic`` artists and ``static_key`` (anything that names the
    rest, e.g. the tokens on the axes) draws only them over those pixels. It draws the pixels
    of a full draw as long as no static artist drawn after a dynamic one overlaps it (then
    list that one too: e.g. the spines over a heatmap whose colours change); tests compare
    the two.
    """
    import numpy as np

    dynamic = list(dynamic)
    old_dpi = fig.dpi
    try:
        fig.set_dpi(dpi)
        pixels, width, height = _drawn_pixels(fig, dpi, pad_inches, dynamic, static_key)
        if (
            _ink_on_edge(pixels, fig)  # the renderer just used, as it is: it measures extents
            and _make_room(fig, _RENDERERS[(width, height, dpi)], pad_inches)
        ):
            pixels, width, height = _drawn_pixels(fig, dpi, pad_inches, dynamic, static_key)
        # what is drawn: every pixel that is not the figure's background (finding it from the
        # pixels costs a few ms; asking every artist for its extent, as savefig does, ~100 ms)
        drawn = pixels.view(np.uint32)[..., 0] != _background(fig)  # (H, W)
        rows, cols = np.flatnonzero(drawn.any(axis=1)), np.flatnonzero(drawn.any(axis=0))
        pad = int(round(pad_inches * dpi))
        if len(rows):
            y0, y1 = max(0, rows[0] - pad), min(height, rows[-1] + 1 + pad)
            x0, x1 = max(0, cols[0] - pad), min(width, cols[-1] + 1 + pad)
        else:  # nothing drawn: the whole figure
            x0, x1, y0, y1 = 0, width, 0, height
        crop = pixels[y0:y1, x0:x1]
        # everything is drawn over the figure's patch: where that is opaque, so is every pixel
        opaque = (
            fig.patch.get_visible()
            and fig.patch.get_facecolor()[3] == 1.0
            and fig.patch.get_alpha() in (None, 1.0)
        ) or bool((crop[..., 3] == 255).all())
        return encode_png(crop[..., :3] if opaque else crop)
    finally:
        fig.set_dpi(old_dpi)


def encode_png(pixels, level: int = 1) -> bytes:
    """(H, W, 3) RGB or (H, W, 4) RGBA uint8 pixels as a PNG: every row unfiltered, zlib at
    ``level``. A picture of flat colours and text compresses about as well as with
    PNG's filters, in a fraction of the time."""
    import struct
    import zlib

    import numpy as np

    pixels = np.asarray(pixels, dtype=np.uint8)
    height, width, channels = pixels.shape
    raw = np.zeros((height, 1 + width * channels), np.uint8)  # byte 0 of a row: filter "none"
    raw[:, 1:] = pixels.reshape(height, -1)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data))
            + kind
            + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 6 if channels == 4 else 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw, level))
        + chunk(b"IEND", b"")
    )


def png_size(png: bytes) -> tuple[int, int]:
    """(width, height) in pixels, read from the PNG header."""
    if png[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    return struct.unpack(">II", png[16:24])


def error_html(exc_or_text) -> str:
    """A red one-line message: ``KeyError: 'xyzzy' is not …`` or the text given."""
    if isinstance(exc_or_text, BaseException):
        detail = (
            str(exc_or_text.args[0])
            if isinstance(exc_or_text, KeyError) and exc_or_text.args
            else str(exc_or_text)
        )
        text = f"{type(exc_or_text).__name__}: {detail}"
    else:
        text = str(exc_or_text)
    return f"<span style='color:#b00'>{html.escape(text)}</span>"


def settle_garbage_collector() -> None:
    """Once per process: one full collection, then everything alive is left out of later ones
    (``gc.freeze``).

    A full collection of Python's cyclic garbage collector walks every object alive; in a
    kernel that has imported torch, matplotlib and IPython and loaded the word vectors that
    takes 0.2-0.35 s here, and it lands on whichever move of a control allocates past the
    collector's threshold. What is alive when the first widget is made (the libraries, the
    data, the learner's variables so far) is what a widget never frees; objects made later are
    collected as before. The cost: a reference cycle among those earlier objects that becomes
    garbage later is not reclaimed (objects without cycles are freed as always)."""
    global _SETTLED
    if _SETTLED:
        return
    _SETTLED = True
    import gc

    gc.collect()
    gc.freeze()


_SETTLED = False


class Picture:
    """An ``ipywidgets.Image`` (``.image``) and a message line (``.message``) above it."""

    def __init__(self):
        import ipywidgets as W

        settle_garbage_collector()

        self.image = W.Image(format="png", layout=W.Layout(max_width="100%", height="auto"))
        self.image.add_class("course-picture")
        self.message = W.HTML()
        self.png: bytes = b""

    def show(self, fig, close: bool = True, dynamic=(), static_key=None) -> bytes:
        """Draw ``fig`` into the image (and close it); clear any message. Returns the PNG.
        ``dynamic`` and ``static_key`` (for a kept figure, ``close=False``): see ``figure_png``."""
        png = figure_png(fig, DISPLAY_DPI * PIXEL_RATIO, dynamic=dynamic, static_key=static_key)
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

    def attempt(self, compute, status, unwritten: str):
        """``compute()``, or None when it raised: then the status line is cleared and the picture
        says why (``unwritten`` for a NotImplementedError: the learner's function is a stub)."""
        try:
            return compute()
        except NotImplementedError:
            status.value = ""
            self.fail(unwritten)
        except Exception as exc:  # a typo in a box, or a bug in the learner's code
            status.value = ""
            self.fail(exc)
        return None

    def note(self, text_html: str) -> None:
        """A message that does not hide the picture (e.g. "not written yet" with a fallback)."""
        self.message.value = text_html


def widget_box(W, rows: list, controls: dict):
    """A picture widget's container: ``rows`` (its controls) above a status line and the
    picture. Its ``controls`` are ``controls`` with the status line and the picture's parts.
    Returns ``(ui, status, picture)``."""
    status, picture = W.HTML(), Picture()
    ui = W.VBox([*rows, status, picture.message, picture.image])
    ui.add_class("course-widget")
    ui.controls = {**controls, "status": status, "image": picture.image, "message": picture.message}
    return ui, status, picture


def slider(W, kind: str, value, low, high, description: str, width: str, **more):
    """An ipywidgets slider of ``kind`` ("IntSlider", "FloatSlider", ...), ``width`` wide, that
    reports its value when it is let go (a widget redraws once, not at every step)."""
    bounds = dict(value=value, min=low, max=high)
    layout = W.Layout(width=width)
    return getattr(W, kind)(**bounds, description=description, continuous_update=False, layout=layout, **more)
