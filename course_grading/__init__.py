"""The instructor side of the course: everything that grades.

Reference implementations (``reference``), hidden checks (``checks``), the integrity audit
(``audit``) and red-flag scanner (``red_flags``), the sandbox and warm sandbox server
(``sandbox``), nbgrader's set-up and preprocessors, the ``course`` command (``cli``) and the
class report. None of it is installed on a student's machine: ``course build-student`` builds
the learner side, ``course_utils``, alone.
"""
