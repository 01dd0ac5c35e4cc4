"""One SQLAlchemy engine per gradebook in a grading process (``gradebook_engines``): nbgrader's
Gradebook opened again and again keeps working, sees what the last one wrote, and compiles
each statement once."""

from __future__ import annotations

import nbgrader.api
import pytest
from nbgrader.api import Gradebook

from course_grading.grading import gradebook_engines, nbgrader_patches


def test_gradebooks_share_one_engine_and_still_work(tmp_path, monkeypatch):
    monkeypatch.setattr(nbgrader.api, "create_engine", None)  # restored after the test
    nbgrader_patches.share_engines()
    assert nbgrader.api.create_engine is gradebook_engines.engine_for
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with Gradebook(url) as gb:
        gb.add_student("ada")
        first = gb.engine
    added = ["ada"]
    for name in ("bo", "cy"):
        with Gradebook(url) as gb:  # the engine the last one disposed of, a new pool
            assert gb.engine is first
            gb.add_student(name)
            added.append(name)
            assert sorted(s.id for s in gb.students) == added
    other = f"sqlite:///{tmp_path / 'other.db'}"
    with Gradebook(other) as gb:
        assert gb.engine is not first and gb.students == []


@pytest.mark.parametrize("shared", [True, False])
def test_each_statement_is_compiled_once(tmp_path, monkeypatch, shared):
    """SQLAlchemy keeps compiled statements on the engine: with a new engine for every
    Gradebook (nbgrader's own way, ``shared=False``), nbgrader's queries were compiled anew
    every time."""
    from sqlalchemy.sql import compiler

    if shared:
        monkeypatch.setattr(nbgrader.api, "create_engine", gradebook_engines.engine_for)
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with Gradebook(url) as gb:
        gb.add_student("ada")
        gb.find_student("ada")
    made = []
    init = compiler.SQLCompiler.__init__

    def counting(self, *args, **kwargs):
        made.append(type(self).__name__)
        init(self, *args, **kwargs)

    monkeypatch.setattr(compiler.SQLCompiler, "__init__", counting)
    for _ in range(3):
        with Gradebook(url) as gb:
            gb.find_student("ada")
    assert (made == []) if shared else (len(made) >= 3)


def test_engines_kept_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(gradebook_engines, "_ENGINES", type(gradebook_engines._ENGINES)())
    urls = [f"sqlite:///{tmp_path / f'g{i}.db'}" for i in range(gradebook_engines.KEPT + 3)]
    engines = [gradebook_engines.engine_for(u) for u in urls]
    assert len(gradebook_engines._ENGINES) == gradebook_engines.KEPT
    assert gradebook_engines.engine_for(urls[-1]) is engines[-1]
    assert gradebook_engines.engine_for(urls[0]) is not engines[0]  # the oldest went
