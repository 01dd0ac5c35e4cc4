"""``SanitizeNotebook``: nothing a student wrote runs as script in a page that shows the notebook.

A submission's notebook is shown as HTML to the instructor (Formgrader renders each autograded
notebook with nbconvert when it is opened) and to the student (feedback). nbconvert's HTML
templates put markdown, raw cells and ``text/html`` outputs into the page as they are, run
``application/javascript`` outputs, and the Formgrader's template does so even with
``HTMLExporter.sanitize_html``. This preprocessor makes the notebook itself inert, with
nbconvert's own sanitizer (``nbconvert.preprocessors.SanitizeHTML``, which uses bleach), and is
run three times: at the end of autograding (so what ``autograded/`` holds is already inert), by
every ``HTMLExporter`` (``c.HTMLExporter.preprocessors``: the Formgrader's pages and feedback,
again) and among the feedback preprocessors.

* **Markdown** (cells, and ``text/markdown`` outputs) is rendered by nbconvert's own markdown
  renderer and the HTML cleaned by bleach. Where cleaning changes nothing (the course's prose,
  math, code, tables, a student's plain answer) the source is kept as it is; otherwise the cell
  becomes the cleaned HTML (what bleach did not allow is shown as text, escaped), so that math
  and the rest still show.
* **Raw cells** and **``text/html``** outputs: cleaned by bleach (tables, text, links kept).
* **Outputs** keep ``text/plain``, ``text/latex``, ``image/png``, ``image/jpeg`` (and the
  grader's own hidden-test marker); ``application/javascript``, ``image/svg+xml`` (script can
  live in SVG), widget views and every other type are dropped; an output with nothing left is
  dropped; streams and errors stay (templates escape them). Output metadata naming files goes.
* **Metadata that templates render**: the notebook's widget state goes (nbconvert would load
  the widget renderer for it and render the views), attachments keep images of PNG, JPEG and
  GIF only, and nbgrader metadata whose ``grade_id`` is not a plain name
  (``untrusted.plain_name``) is removed (the Formgrader and feedback templates put the grade id
  into the page unescaped; the course's own grade ids are plain).
"""

from __future__ import annotations

import bleach
from bs4 import BeautifulSoup, NavigableString, Tag
from markupsafe import escape
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath
from nbconvert.preprocessors.sanitize import SanitizeHTML
from traitlets import Any, Bool, Integer, List, Set, Unicode

from course_grading.authoring.cells import text

from .. import untrusted
from .hidden_split import HIDDEN_MIME

HEADINGS = ["h1", "h2", "h3", "h4", "h5", "h6"]
# bleach's tags, and what nbconvert's markdown renderer, a table, a formula and a folded hint
# (<details><summary>: no script, no attribute beyond class) need
TAGS = sorted(
    {
        *bleach.ALLOWED_TAGS,
        *HEADINGS,
        "p",
        "br",
        "hr",
        "pre",
        "span",
        "div",
        "table",
        "thead",
        "tbody",
        "tfoot",
        "tr",
        "th",
        "td",
        "caption",
        "img",
        "sup",
        "sub",
        "del",
        "s",
        "dl",
        "dt",
        "dd",
        "kbd",
        "var",
        "samp",
        "small",
        "mark",
        "u",
        "q",
        "cite",
        "details",
        "summary",
    }
)
ATTRIBUTES = {
    "*": ["class"],
    **{h: ["class", "id"] for h in HEADINGS},  # the renderer's heading anchors
    "a": ["href", "title", "class"],
    "abbr": ["title"],
    "acronym": ["title"],
    "img": ["src", "alt", "title", "width", "height"],
    "th": ["class", "style", "align", "colspan", "rowspan"],
    "td": ["class", "style", "align", "colspan", "rowspan"],
    "ol": ["class", "start"],
}
STYLES = ["text-align"]  # the markdown renderer aligns table columns so
PROTOCOLS = ["http", "https", "mailto", "attachment"]
SAFE_OUTPUT_KEYS = {"text/plain", "text/latex", "image/png", "image/jpeg", HIDDEN_MIME}
SAFE_ATTACHMENTS = {"image/png", "image/jpeg", "image/gif"}
OUTPUT_TYPES = {"stream", "error", "display_data", "execute_result"}
_SEEN: dict = {}  # (markdown, settings) -> what sanitize_markdown made of it
SEEN_LENGTH = 65_536  # longer markdown is not kept in _SEEN (the course's cells are far shorter)


class SanitizeNotebook(SanitizeHTML):
    """Markdown, raw cells, outputs and rendered metadata of a notebook made inert (above)."""

    enabled = Bool(True, help="on wherever it is listed (nbgrader registers its steps so)").tag(config=True)
    tags = List(Unicode(), default_value=TAGS, config=True, help="HTML tags kept")
    attributes = Any(default_value=ATTRIBUTES, config=True, help="HTML attributes kept, per tag")
    styles = List(Unicode(), default_value=STYLES, config=True, help="CSS properties kept in style")
    protocols = List(Unicode(), default_value=PROTOCOLS, config=True, help="URL schemes kept")
    safe_output_keys = Set(default_value=SAFE_OUTPUT_KEYS, config=True, help="Output types kept as they are")
    sanitized_output_types = Set(
        default_value={"text/html", "text/markdown"}, config=True, help="Output types kept after cleaning"
    )
    max_rendered_chars = Integer(
        500_000,
        min=0,
        config=True,
        help="Characters of markdown rendered per notebook (nbconvert's renderer costs about "
        "10 microseconds a character): past them, a markdown cell or output is shown as its "
        "text, escaped. The course's own cells, judged once per process, do not count.",
    )

    def preprocess(self, nb, resources):
        self._rendering_left = self.max_rendered_chars
        nb.metadata.pop("widgets", None)
        for index, cell in enumerate(nb.cells):
            nb.cells[index], resources = self.preprocess_cell(cell, resources, index)
        return nb, resources

    def preprocess_cell(self, cell, resources, cell_index):
        grading = cell.get("metadata", {}).get("nbgrader")
        if (
            isinstance(grading, dict)
            and "grade_id" in grading
            and not untrusted.plain_name(grading["grade_id"])
        ):
            del cell.metadata["nbgrader"]
        if "attachments" in cell:
            cell.attachments = {
                name: {k: v for k, v in (item or {}).items() if k in SAFE_ATTACHMENTS}
                for name, item in (cell.attachments or {}).items()
            }
        kind = cell.get("cell_type")
        if kind == "markdown":
            cell.source = self.sanitize_markdown(text(cell.get("source")), cell.get("attachments"))
        elif kind == "raw":
            cell.source = self.sanitize_html_tags(text(cell.get("source")))
        elif kind == "code":
            cell.outputs = self.sanitize_code_outputs(cell.get("outputs") or [])
        return cell, resources

    def sanitize_code_outputs(self, outputs):
        kept = []
        for output in outputs:
            kind = output.get("output_type")
            if kind not in OUTPUT_TYPES:
                continue
            if kind in ("stream", "error"):
                kept.append(output)
                continue
            data = {}
            for key, value in (output.get("data") or {}).items():
                if key in self.safe_output_keys:
                    data[key] = value
                elif key == "text/markdown" and key in self.sanitized_output_types:
                    data[key] = self.sanitize_markdown(text(value))
                elif key in self.sanitized_output_types:
                    data[key] = self.sanitize_html_tags(text(value))
                else:
                    self.log.info("Removing %s", key)
            if not data:
                continue
            output.data = data
            if isinstance(output.get("metadata"), dict):
                output.metadata.pop("filenames", None)
            kept.append(output)
        return kept

    def sanitize_html_tags(self, html_str):
        """bleach's clean with the tags, attributes, styles and protocols above (escaping what
        it does not allow, comments removed)."""
        from bleach.css_sanitizer import CSSSanitizer

        return bleach.clean(
            html_str,
            tags=self.tags,
            attributes=self.attributes,
            protocols=self.protocols,
            strip=self.strip,
            strip_comments=self.strip_comments,
            css_sanitizer=CSSSanitizer(allowed_css_properties=self.styles),
        )

    def sanitize_markdown(self, source: str, attachments=None) -> str:
        """``source`` when nbconvert renders it to HTML that bleach leaves as it is, else that
        HTML cleaned, as one HTML block of markdown (rendered as it is, math included); markdown
        that nbconvert cannot render at all becomes its text, escaped."""
        # the course's prose is the same in every submission: judged once per process
        key = (
            source,
            repr((self.tags, self.attributes, self.styles, self.protocols, self.strip, self.strip_comments)),
        )
        if not attachments and key in _SEEN:
            return _SEEN[key]
        left = getattr(self, "_rendering_left", self.max_rendered_chars)
        if len(source) > left:  # rendering is not linear enough to do for any length
            return _as_text(source)
        self._rendering_left = left - len(source)
        made = self._sanitize_markdown(source, attachments)
        if not attachments and len(source) <= SEEN_LENGTH:
            if len(_SEEN) >= 4096:
                _SEEN.clear()
            _SEEN[key] = made
        return made

    def _sanitize_markdown(self, source: str, attachments) -> str:
        try:
            html = render_markdown(source, attachments)
        except Exception:  # noqa: BLE001 - a broken cell is shown as text, never as markup
            return _as_text(source)
        clean = self.sanitize_html_tags(html)
        if same_markup(html, clean):
            return source
        return _block(clean)


def render_markdown(source: str, attachments=None) -> str:
    """Markdown to HTML as nbconvert's templates render it (``markdown2html``)."""
    renderer = IPythonRenderer(escape=False, attachments=dict(attachments or {}))
    return MarkdownWithMath(renderer=renderer).render(source)


def _as_text(source: str) -> str:
    """Markdown shown as its text, escaped: inert, and linear in its length."""
    return _block("<pre>" + str(escape(source)) + "</pre>")


def _block(html: str) -> str:
    """Clean ``html`` as markdown that renders to it: one line (a markdown HTML block ends at a
    blank line; &#10; is a newline in HTML, in text and in attribute values alike)."""
    return '<div class="course-sanitized">' + html.replace("\r", "").replace("\n", "&#10;") + "</div>"


def same_markup(a: str, b: str) -> bool:
    """Whether HTML ``a`` and ``b`` parse to the same elements, attributes and text."""
    return _tree(BeautifulSoup(a, "html.parser")) == _tree(BeautifulSoup(b, "html.parser"))


def _tree(node):
    if isinstance(node, NavigableString):
        return (type(node).__name__, str(node))
    if isinstance(node, Tag):
        attrs = {k: " ".join(v) if isinstance(v, list) else v for k, v in node.attrs.items()}
        return (node.name, sorted(attrs.items()), [_tree(child) for child in node.children])
    return (type(node).__name__,)
