"""Grading a class: each submission staged (``staging``) and graded with nbgrader in worker
processes (``autograde``, ``workers``), what the gradebook holds around a run (``recorded``),
what is graded already (``ledger``), the red-flag scan (``red_flags``), progress; every change
to nbgrader's own code (``nbgrader_patches``) and what two of them install
(``gradebook_engines``, ``metadata_schema``)."""
