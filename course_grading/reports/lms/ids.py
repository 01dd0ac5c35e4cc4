"""The LMS's own id of a student, in nbgrader's one ``Student.lms_user_id`` field: Moodle's ``ID
number`` as it is, Canvas's numeric user ``ID`` as ``canvas:<ID>``. The prefix keeps the two
apart: a Moodle export by ID number never writes a Canvas ID, and a Canvas file is never matched
by a Moodle ID number that happens to be a number too."""

from __future__ import annotations

CANVAS = "canvas:"


def canvas_tagged(canvas_id: str) -> str:
    """The field's value for Canvas's user ``canvas_id``."""
    return f"{CANVAS}{canvas_id}"


def canvas_id(lms_user_id: str | None) -> str:
    """Canvas's user ID the field holds ("" where it holds none)."""
    value = lms_user_id or ""
    return value[len(CANVAS) :] if value.startswith(CANVAS) else ""


def id_number(lms_user_id: str | None) -> str:
    """Moodle's ID number the field holds ("" where it holds none, or Canvas's ID)."""
    value = lms_user_id or ""
    return "" if value.startswith(CANVAS) else value
