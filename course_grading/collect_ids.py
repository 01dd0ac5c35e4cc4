"""``PlainIdCollect``: nbgrader's exchange collect, refusing a submission whose student id is
not a plain name (``untrusted.plain_name``: ASCII letters, digits, ``. _ - @``).

The student id of a submission in the exchange's ``inbound/`` comes from its file name, which
the student chose. An id holding markup (``<img src=x onerror=...>``) would be written into
``submitted/``, the gradebook and the instructor's pages. Such a submission is refused loudly
(an error in the log naming it, and the command's exit status 1 once the others are
collected), and nothing of it is written. Selected in nbgrader_config.py::

    c.ExchangeFactory.collect = "course_grading.collect_ids.PlainIdCollect"
"""
from __future__ import annotations

from nbgrader.exchange.default.collect import ExchangeCollect

from .untrusted import plain_name


class PlainIdCollect(ExchangeCollect):
    """nbgrader's collect, submissions with an unsafe student id refused (above)."""

    def init_src(self):
        super().init_src()
        self.refused = [rec for rec in self.src_records if not plain_name(rec["username"])]
        self.src_records = [rec for rec in self.src_records if plain_name(rec["username"])]
        for rec in self.refused:
            self.log.error("Refused the submission %s of %s: its student id %s is not a plain "
                           "name (letters, digits, . _ - @); nothing of it was collected",
                           ascii(rec["filename"]), self.coursedir.assignment_id, ascii(rec["username"]))

    def copy_files(self):
        super().copy_files()
        if self.refused:
            self.fail(f"{len(self.refused)} submission(s) of {self.coursedir.assignment_id} refused: "
                      "a student id that is not a plain name (see above); the others were collected")
