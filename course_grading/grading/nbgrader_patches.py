"""Every change the course makes to nbgrader's own code, in one place, for the nbgrader
versions it was tested with.

nbgrader offers no hook for these; each replaces or wraps a private step, so each depends on
nbgrader's internals. Importing this module checks nbgrader's version first: outside
``TESTED`` it raises ``UntestedNbgrader`` (one line saying which version is installed and
which are tested) rather than let a patch misfire.

* ``use_alembic_head``: the gradebook schema revision read from nbgrader's migrations, not by
  running the ``alembic`` command (``nbgrader.api.get_alembic_version``), applied on import;
* ``record_failures``: a converter's steps wrapped so that the exception nbgrader catches and
  only logs is kept (``BaseConverter.convert_notebooks``'s steps);
* ``share_engines``: one SQLAlchemy engine per gradebook (``nbgrader.api.create_engine``,
  ``gradebook_engines``);
* ``validate_schema_once``: the metadata schema checked once
  (``nbgrader.nbgraderformat.common.jsonschema``, ``metadata_schema``);
* ``restore_environment``: the variables nbgrader sets while it executes a notebook
  (``NBGRADER_EXECUTION``, ``nbgrader.utils.setenv``) restored when the execution raises too,
  applied on import.
"""

from __future__ import annotations

import contextlib
import os

import nbgrader
import nbgrader.api

from course_grading.errors import AssignmentChanged

TESTED = ((0, 9, 6), (0, 10, 0))  # [lowest, highest): pyproject.toml and environment.yml pin the same


class UntestedNbgrader(ImportError):
    """The installed nbgrader is not one the course's patches were tested with."""


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for part in text.split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit()) if not part.isdigit() else part
        parts.append(int(digits or 0))
    return tuple(parts)


def check_version(version: str = nbgrader.__version__) -> None:
    """UntestedNbgrader unless ``version`` lies in ``TESTED``."""
    low, high = TESTED
    if not low <= _version(version) < high:
        raise UntestedNbgrader(
            f"nbgrader {version} is installed; the course patches nbgrader's internals and was tested "
            f"with nbgrader >={'.'.join(map(str, low))},<{'.'.join(map(str, high))} "
            "(install that: bash scripts/setup.sh)"
        )


check_version()


# --------------------------------------------------------------------------- the gradebook schema


def _alembic_head() -> str:
    """The gradebook schema revision, as nbgrader.api.get_alembic_version finds it by running
    the ``alembic`` command (3-7 s here, and only if the venv's bin/ is on PATH)."""
    from alembic.script import ScriptDirectory
    from nbgrader import dbutil

    return ScriptDirectory(dbutil.ALEMBIC_DIR).get_current_head()


def use_alembic_head() -> None:
    """nbgrader asks for it whenever it creates a gradebook: each `course check`, each test course."""
    nbgrader.api.get_alembic_version = _alembic_head


use_alembic_head()


# --------------------------------------------------------------------------- its environment


@contextlib.contextmanager
def _setenv(**variables: str):
    """nbgrader.utils.setenv, restoring each variable's value before (or its absence) even when
    the block raises: nbgrader's own leaves ``NBGRADER_EXECUTION='autograde'`` set in the
    grader's process after a notebook's execution fails, and what the process starts later (a
    kernel, a Jupyter server) then believes it is being graded."""
    before = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def restore_environment() -> None:
    """nbgrader's converters (``utils.setenv``) use ``_setenv`` from now on."""
    import nbgrader.utils

    nbgrader.utils.setenv = _setenv


restore_environment()


# --------------------------------------------------------------------------- a converter's failures

# The converter steps inside which nbgrader catches exceptions and only logs them
# (BaseConverter.convert_notebooks); the last one that raised is what failed.
STEPS = (
    "init_destination",
    "init_assignment",
    "convert_single_notebook",
    "set_permissions",
    "_clean_old_notebooks",
)


def record_failures(converter, recorded: list) -> None:
    """Wrap the converter's steps (on this instance only) so that every exception passing out
    of one is appended to ``recorded`` before nbgrader catches it."""
    for name in STEPS:
        step = getattr(converter, name, None)
        if step is None:
            continue

        def recording(*args, _step=step, _name=name, **kwargs):
            try:
                return _step(*args, **kwargs)
            except BaseException as exc:
                if _name == "_clean_old_notebooks" and type(exc).__name__ == "NbGraderException":
                    exc = AssignmentChanged(str(exc))  # the only refusal this step makes
                recorded.append(exc)
                raise

        setattr(converter, name, recording)


# --------------------------------------------------------------------------- in a grading worker


def share_engines() -> None:
    """Every nbgrader ``Gradebook`` opened in this process from now on takes its engine from
    ``gradebook_engines.engine_for``."""
    from course_grading.grading.gradebook_engines import engine_for

    nbgrader.api.create_engine = engine_for


def validate_schema_once() -> None:
    """nbgrader's metadata validators in this process use ``metadata_schema.validate`` from
    now on."""
    import types

    from nbgrader.nbgraderformat import common

    from course_grading.grading.metadata_schema import validate

    if getattr(common.jsonschema, "validate", None) is not validate:
        common.jsonschema = types.SimpleNamespace(validate=validate)
