"""Authoring the course: the vocabulary of a source notebook's cells (``cells``), deterministic
notebooks (``nbformat_tools``), the release (``release``), the building blocks that later
notebooks reuse (``building_blocks``) and the student's bundle (``student_side``)."""
