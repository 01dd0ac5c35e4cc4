"""nbgrader's check of cells' nbgrader metadata with the schema checked once
(``course_grading.grading.metadata_schema``): the same verdicts and errors as ``jsonschema.validate``."""

from __future__ import annotations

import copy
from pathlib import Path

import jsonschema
import nbformat
import pytest
from nbgrader.nbgraderformat import common
from nbgrader.nbgraderformat.v3 import MetadataValidatorV3

from course_grading.grading import metadata_schema, nbgrader_patches

ROOT = Path(__file__).resolve().parents[1]


def _graded_metadata() -> list[dict]:
    nb = nbformat.read(str(ROOT / "solutions" / "03_attention" / "03_attention.ipynb"), 4)
    return [dict(c.metadata["nbgrader"]) for c in nb.cells if "nbgrader" in c.metadata]


def _broken() -> list[dict]:
    meta = _graded_metadata()
    graded = next(m for m in meta if m.get("grade"))
    cases = []
    for change in (
        {"points": "two"},
        {"grade": "yes"},
        {"grade_id": 7},
        {"schema_version": "3"},
        {"solution": None},
    ):
        cases.append({**copy.deepcopy(graded), **change})
    missing = copy.deepcopy(graded)
    del missing["grade_id"]
    return cases + [missing]


def _error(call):
    try:
        call()
    except jsonschema.ValidationError as exc:
        return (exc.message, list(exc.path), list(exc.schema_path))
    return None


@pytest.mark.parametrize("meta", _graded_metadata() + _broken())
def test_the_same_verdict_and_error_as_jsonschema(meta):
    schema = MetadataValidatorV3().schema
    assert _error(lambda: metadata_schema.validate(meta, schema)) == _error(
        lambda: jsonschema.validate(meta, schema)
    )


def test_nbgraders_validator_checks_its_schema_once(monkeypatch):
    checked = []
    cls = jsonschema.validators.validator_for(MetadataValidatorV3().schema)
    original = cls.check_schema.__func__
    monkeypatch.setattr(cls, "check_schema", classmethod(lambda c, s: checked.append(1) or original(c, s)))
    monkeypatch.setattr(common, "jsonschema", common.jsonschema)  # restored after the test
    nbgrader_patches.validate_schema_once()
    validator = MetadataValidatorV3()
    cells = [nbformat.v4.new_code_cell(metadata={"nbgrader": m}) for m in _graded_metadata()]
    for cell in cells:
        validator.validate_cell(cell)
    assert len(checked) == 1
    bad = nbformat.v4.new_code_cell(metadata={"nbgrader": _broken()[0]})
    with pytest.raises(jsonschema.ValidationError, match="'two' is not of type 'number'"):
        validator.validate_cell(bad)
