"""nbgrader's check of a cell's nbgrader metadata, with the schema itself checked once.

nbgrader validates every graded cell's metadata with ``jsonschema.validate(metadata, schema)``,
which first checks the *schema* against JSON Schema's meta-schema, every time: about 0.4 ms a
cell, most of it that check, and a submission's cells are validated several times over.
``nbgrader_patches.validate_schema_once()`` makes nbgrader's validators call ``validate``
below: the schema is checked once per schema object, then the metadata is validated as
``jsonschema.validate`` does it (the same validator class, the same best-matching error).
"""

from __future__ import annotations

import threading

from jsonschema.exceptions import best_match
from jsonschema.validators import validator_for

_VALIDATORS: dict[int, tuple] = {}  # id(schema) -> (schema, validator)
_KEPT = 64
_LOCK = threading.Lock()


def validate(instance, schema) -> None:
    """``jsonschema.validate(instance, schema)``, the schema checked the first time only."""
    error = best_match(_validator(schema).iter_errors(instance))
    if error is not None:
        raise error


def _validator(schema):
    with _LOCK:
        kept = _VALIDATORS.get(id(schema))
        if kept is not None and kept[0] is schema:  # the schema is held: its id is not reused
            return kept[1]
        cls = validator_for(schema)
        cls.check_schema(schema)
        validator = cls(schema)
        if len(_VALIDATORS) >= _KEPT:
            _VALIDATORS.clear()
        _VALIDATORS[id(schema)] = (schema, validator)
        return validator
