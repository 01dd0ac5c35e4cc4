"""Checks written as ``check_<exercise>(c, fn)``, their ``Check`` opened and closed around them.

The decorator ``exercise_check`` makes the check the learner calls, ``check_<exercise>(fn)``,
which opens the exercise's ``Check``, runs the body and closes it (``c.done()``). The checks of
a notebook share their ``Check``'s settings this way, visible (``similarity``) and hidden
(``course_grading.checks``) alike."""

from __future__ import annotations

import functools
import inspect

from ._core import Check


def exercise_check(forbidden=(), ops=(), hidden: bool = False, first=None):
    """The decorator: the body ``check_<exercise>(c, fn)`` runs with a ``Check`` named after the
    exercise (``forbidden``, ``ops``, ``hidden``), after ``first(fn)`` where given. The check's
    signature is the learner's: the body's, without ``c``."""

    def wrap(body):
        exercise = body.__name__.removeprefix("check_")
        signature = inspect.signature(body)

        @functools.wraps(body)
        def check(fn) -> None:
            if first is not None:
                first(fn)
            c = Check(exercise, forbidden, hidden=hidden, ops=ops)
            body(c, fn)
            c.done()

        check.__signature__ = signature.replace(parameters=list(signature.parameters.values())[1:])
        return check

    return wrap
