"""The instructor side of the course: everything that grades.

Reference implementations (``reference``), hidden checks (``checks``), the integrity audit
(``audit``) and red-flag scanner (``red_flags``), the sandbox and warm sandbox server
(``sandbox``), nbgrader's set-up and preprocessors, the ``course`` command (``cli``) and the
class report. None of it is installed on a student's machine: ``course build-student`` builds
the learner side, ``course_utils``, alone.
"""
import sys as _sys

# jsonschema (through nbformat and nbgrader) imports rfc3987_syntax, when installed, for its
# "iri" format check, and that module builds a grammar on import: 0.7 s of CPU in every process
# that imports nbformat (the `course` command, its fork server, each `nbgrader` step). Notebook
# validation never checks that format. Set here, before any module of this package imports
# nbgrader (a module that imported nbgrader first used to bring it in regardless); a process
# that loaded it already keeps it.
_sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]
