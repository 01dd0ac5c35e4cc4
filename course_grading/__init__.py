"""The instructor side of the course: everything that grades.

    course/         where the course lives: its root, configuration, folders and gradebook
    commands/       the ``course`` command (``cli``) and check, status, doctor, roster
    grading/        a class graded (autograde): each submission staged (staging) and graded
                    in workers, the ledger, the red-flag scan, nbgrader's patches
    sandbox/        the sandbox and the warm sandbox server that grading kernels run in
    audit/          the integrity audit of a graded notebook
    preprocessors/  the nbgrader preprocessors the course's configuration names
    reports/        results, the class report, feedback and the exports
    authoring/      source notebooks' cells, the release, building blocks, the student bundle
    reference/      the reference implementations (secret)
    checks/         the hidden checks (secret)

At the top, the modules whose dotted path is named outside the code (a configuration or a
command line): ``exchange`` (``nbgrader_config.py``), ``instructor_server`` (the Jupyter
server's extension), ``expected`` (``python -m course_grading.expected``); the two that
every part uses: ``errors`` and ``untrusted``; and ``system``, the commands that fix this
machine (the doctor's fixes, the sandbox's). None of it is installed on a student's machine:
``course build-student`` builds the learner side, ``course_utils``, alone.
"""

import sys as _sys

# jsonschema (through nbformat and nbgrader) imports rfc3987_syntax, when installed, for its
# "iri" format check, and that module builds a grammar on import: 0.7 s of CPU in every process
# that imports nbformat (the `course` command, its fork server, each `nbgrader` step). Notebook
# validation never checks that format. Set here, before any module of this package imports
# nbgrader (a module that imported nbgrader first used to bring it in regardless); a process
# that loaded it already keeps it.
_sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]
