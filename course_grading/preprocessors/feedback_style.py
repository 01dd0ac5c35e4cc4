"""``FeedbackStyle``: the feedback page wraps long lines instead of cutting them at its edge.

nbgrader's feedback template shows each output in a ``<pre>`` that keeps a line whole; a check's
message is one long line whose end, the hint, is the most useful part, and the page cut it off
(the student saw "(largest difference 0.0277)." and nothing after). This step adds one style
sheet to those the template inlines (``resources["inlining"]["css"]``, filled by nbconvert's
``CSSHTMLHeaderPreprocessor``, so it runs after that): outputs and code wrap at the page's
width, breaking inside a long word only where nothing else fits.

Only CSS, written by the course (nothing of a submission), inlined in the page's own
``<style>``, as nbgrader's template does with its own; nothing loads from elsewhere.
"""

from __future__ import annotations

from nbgrader.preprocessors import NbGraderPreprocessor

WRAP_CSS = """
/* course_grading.preprocessors.FeedbackStyle: long lines wrap at the page's edge */
div.output_area pre, div.output_subarea pre, div.output_text pre, div.output_error pre,
div.input_area pre, div.highlight pre {
    white-space: pre-wrap;
    overflow-wrap: anywhere;
    word-break: normal;
}
div.output_area, div.output_subarea, div.input_area { max-width: 100%; overflow-x: visible; }
"""


class FeedbackStyle(NbGraderPreprocessor):
    """Append ``WRAP_CSS`` to the style sheets the feedback page inlines."""

    def preprocess(self, nb, resources):
        inlining = resources.setdefault("inlining", {})
        css = list(inlining.get("css") or [])
        if WRAP_CSS not in css:
            css.append(WRAP_CSS)
        inlining["css"] = css
        return nb, resources
