"""The course a command works on: ``course.Course``, built once where a command starts and
handed to it (the root, the configuration read once, the folders, the gradebook URL, the
sandbox settings, the notebook bounds); where a course lives (``course_dir``: the root's
search rule, the folders, the submissions); the one reader of configuration files
(``config``); nbgrader's CourseDirectory, gradebook and converters for a course
(``nbgrader_setup``, with ``GradingRun``: a Course plus one run's flags)."""
