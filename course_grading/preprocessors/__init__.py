"""The course's nbgrader preprocessors, one per module, named after their classes (as in
``nbgrader.preprocessors``). Configure them by their dotted names, e.g.
``"course_grading.preprocessors.ScrubHiddenTracebacks"``."""
from .limited_execute import LimitedExecute
from .scrub_hidden_tracebacks import ScrubHiddenTracebacks

__all__ = ["LimitedExecute", "ScrubHiddenTracebacks"]
