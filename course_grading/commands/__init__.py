"""The ``course`` command: ``cli`` parses the arguments, finds the course and starts early what
the command will wait for; ``handlers`` holds what each subcommand does. The commands that are
only an entry point live here too (``check``, ``status``, ``doctor``, ``roster``); the grading,
report and authoring commands live with what they do (``grading``, ``reports``, ``authoring``)."""
