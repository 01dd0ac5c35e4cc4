"""The course: where it lives (its root, found from ``--root``, ``COURSE_ROOT``, the
instructor's configuration or the installed clone), its configuration (``nbgrader_config.py``),
its folders and gradebook (``course_dir``, ``nbgrader_setup``)."""
