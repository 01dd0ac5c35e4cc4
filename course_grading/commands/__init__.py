"""The ``course`` command (``cli``) and the commands that are only an entry point: ``check``,
``status``, ``doctor`` and ``roster``. The grading, report and authoring commands live with
what they do (``grading``, ``reports``, ``authoring``); ``cli`` dispatches to them."""
