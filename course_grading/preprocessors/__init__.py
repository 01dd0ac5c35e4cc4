"""The course's nbgrader preprocessors, one per module, named after their classes (as in
``nbgrader.preprocessors``). Configure them by their dotted names, e.g.
``"course_grading.preprocessors.ScrubHiddenTracebacks"``.

Autograding: ``RefuseLinks`` first among the sanitizing steps and ``TrustedMetadata`` right after
it, ``LimitedExecute`` (in place of
nbgrader's Execute), ``RequireSetup`` right after it, then ``ExplainUndefinedNames``. Feedback: ``HideHiddenOutputs`` and ``ScrubHiddenTracebacks`` before nbgrader's
``ClearHiddenTests`` (``FEEDBACK_PREPROCESSORS``), ``PendingGrades`` in place of nbgrader's
``GetGrades`` (a score that waits for grading by hand says so), and ``FeedbackStyle`` last
(``FEEDBACK_LAST``: long lines wrap). ``SanitizeNotebook`` last among the
autograding steps, in feedback, and in every HTMLExporter (the Formgrader's pages).
``GraderRubric`` before it in every HTMLExporter: the model answer and rubric beside each
written answer, on the Formgrader's submission page only. ``kernel_messages`` (reading a
kernel's messages) and ``hidden_split`` (running a cell's hidden tests apart) are parts of
``LimitedExecute``.
"""

from .feedback_style import FeedbackStyle
from .grader_rubric import GraderRubric
from .hidden_outputs import HideHiddenOutputs
from .limited_execute import LimitedExecute
from .pending_grades import PendingGrades
from .refuse_links import LinkedSubmission, RefuseLinks
from .require_setup import RequireSetup, SetupCellFailed
from .sanitize import SanitizeNotebook
from .scrub_hidden_tracebacks import ScrubHiddenTracebacks
from .trusted_metadata import TrustedMetadata
from .undefined_names import ExplainUndefinedNames

FEEDBACK_PREPROCESSORS = [ScrubHiddenTracebacks, HideHiddenOutputs, SanitizeNotebook]
FEEDBACK_LAST = [FeedbackStyle]  # after nbconvert's CSSHTMLHeaderPreprocessor, which sets the page's CSS

__all__ = [
    "FEEDBACK_LAST",
    "FEEDBACK_PREPROCESSORS",
    "ExplainUndefinedNames",
    "FeedbackStyle",
    "GraderRubric",
    "HideHiddenOutputs",
    "PendingGrades",
    "LimitedExecute",
    "LinkedSubmission",
    "RefuseLinks",
    "RequireSetup",
    "SanitizeNotebook",
    "ScrubHiddenTracebacks",
    "SetupCellFailed",
    "TrustedMetadata",
]
