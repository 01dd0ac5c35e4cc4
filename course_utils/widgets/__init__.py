"""Thin ipywidgets over ``course_utils.plots``: controls wired to a tested plotting function.

Every widget function returns ``None`` while nbgrader runs (``course_utils.grading()``), so
grading never waits on a figure. ipywidgets is imported inside the modules, never here.
"""
