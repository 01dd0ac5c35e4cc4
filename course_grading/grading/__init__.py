"""Grading a class: staging each submission and grading it with nbgrader in worker processes
(``autograde``, ``workers``), what is graded already (``ledger``), the red-flag scan
(``red_flags``), progress, and the patches that make nbgrader's gradebook and metadata check
fast (``gradebook_engines``, ``metadata_schema``)."""
