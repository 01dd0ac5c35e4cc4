"""``course doctor --instructor``: what the instructor's server and the class's exchange need
(docs/guides/jupyterhub.md), each FAIL with a fix that makes it OK:

* the Formgrader's Content-Security-Policy extension (``course_grading.instructor_server``)
  enabled in the server's configuration;
* ``frame-ancestors 'self'`` in the server's Content-Security-Policy header (JupyterHub's
  ``'none'`` leaves the Formgrader tab blank);
* the exchange (``c.Exchange.root``): sticky and writable by all (1777); once released, the
  course's folder and its ``outbound/`` the instructor's (0755), its ``inbound/`` the
  instructor's with 3733 (students drop in, cannot list or move another's);
* the PostgreSQL gradebook, when ``CourseDirectory.db_url`` names one (``doctor_gradebook``).

The server's configuration is read as Jupyter reads it (``course.config.jupyter_server_config``:
the instructor's own files, which the server runs anyway).
``python -m course_grading.commands.doctor_instructor configure-server`` (the fix of both server
lines) writes both settings where they win (``server_config``).
"""

from __future__ import annotations

import os
import pwd
import shlex
import stat
import sys
from pathlib import Path

from course_grading import system

from . import server_config
from .doctor import FAIL, OK, WARN, Line
from .doctor_gradebook import check_gradebook

EXTENSION = "course_grading.instructor_server"
FRAMING = "frame-ancestors 'self'"
CONFIGURE = f"{sys.executable} -m course_grading.commands.doctor_instructor configure-server"
# the exchange's folders and their modes (exchange.SafeReleaseAssignment makes them so)
ROOT_MODE, COURSE_MODE, OUTBOUND_MODE, INBOUND_MODE = 0o1777, 0o755, 0o755, 0o3733


def check_csp_extension(config) -> Line:
    what = "formgrader CSP"
    enabled = dict(config.ServerApp.get("jpserver_extensions", {}) or {})
    if enabled.get(EXTENSION):
        return Line(OK, what, f"{EXTENSION} enabled: the Formgrader's pages run no script but their own")
    return Line(
        FAIL,
        what,
        f"{EXTENSION} is not enabled: a student's notebook could run script in the Formgrader's pages",
        CONFIGURE,
    )


def check_framing(config) -> Line:
    what = "frame-ancestors"
    settings = config.ServerApp.get("tornado_settings", {}) or {}
    policy = str((settings.get("headers") or {}).get("Content-Security-Policy", ""))
    if FRAMING in policy:
        return Line(OK, what, f"Content-Security-Policy: {policy}")
    found = f"Content-Security-Policy: {policy}" if policy else "no Content-Security-Policy header set"
    return Line(
        FAIL,
        what,
        f"{found}: under JupyterHub (frame-ancestors 'none') the Formgrader tab stays blank",
        CONFIGURE,
    )


def configure_server(folder=None) -> Path:
    """Enable the Formgrader's CSP extension and add ``frame-ancestors 'self'`` to the
    Content-Security-Policy header where they win (``server_config``), the server's other
    ``tornado_settings`` and CSP directives kept as the server had them."""
    from course_grading.course.config import jupyter_server_config

    effective = jupyter_server_config().ServerApp.get("tornado_settings", {}) or {}

    def change(server: dict) -> None:
        server.setdefault("jpserver_extensions", {})[EXTENSION] = True
        settings = {**server_config.json_only(effective), **server.get("tornado_settings", {})}
        headers = settings["headers"] = {**(effective.get("headers") or {}), **settings.get("headers", {})}
        policy = [
            p.strip()
            for p in str(headers.get("Content-Security-Policy", "")).split(";")
            if p.strip() and not p.strip().startswith("frame-ancestors")
        ]
        headers["Content-Security-Policy"] = "; ".join(policy + [FRAMING])
        server["tornado_settings"] = settings

    return server_config.update(change, folder)


def _mode_line(what: str, path: Path, mode: int, owner: int | None, sudo: bool) -> Line | None:
    """A FAIL line when ``path`` has another mode or (``owner``) another owner; None if right."""
    st = path.stat()
    problems, fixes = [], []
    if owner is not None and st.st_uid != owner:
        problems.append(f"owned by {_user(st.st_uid)}, not {_user(owner)}")
        fixes.append(system.as_root(f"chown {_user(owner)} {shlex.quote(str(path))}"))
    if stat.S_IMODE(st.st_mode) != mode:
        problems.append(f"mode {stat.S_IMODE(st.st_mode):04o}, not {mode:04o}")
        chmod = f"chmod {mode:04o} {shlex.quote(str(path))}"
        fixes.append(system.as_root(chmod) if sudo else chmod)
    if not problems:
        return None
    return Line(FAIL, what, f"{path}: {', '.join(problems)}", " && ".join(fixes))


def _as_root_unless_mine(command: str, path: Path) -> str:
    """``command`` on ``path`` (to be made), as root unless its nearest folder is writable by us."""
    parent = next(p for p in path.parents if p.exists())
    return command if os.access(parent, os.W_OK) else system.as_root(command)


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def check_exchange(exchange: Path, course_id: str, me: int | None = None, named: bool = True) -> Line:
    """The exchange's modes and owner. One that does not exist FAILs where the configuration
    names it (``named``), else WARNs: a course that copies submissions into ``submitted/``
    itself needs none."""
    what = "exchange"
    me = os.getuid() if me is None else me
    if not exchange.is_dir():
        return Line(
            FAIL if named else WARN,
            what,
            f"{exchange} does not exist (c.Exchange.root)"
            + ("" if named else ": needed only to release and collect through nbgrader's exchange"),
            " && ".join(
                _as_root_unless_mine(f"{command} {shlex.quote(str(exchange))}", exchange)
                for command in ("mkdir -p", "chmod 1777")
            ),
        )
    wrong = _mode_line(what, exchange, ROOT_MODE, None, sudo=exchange.stat().st_uid != me)
    if wrong:
        return wrong
    course = exchange / course_id
    if not course.is_dir():
        return Line(OK, what, f"{exchange}: 1777; no release of {course_id} yet")
    for path, mode in (
        (course, COURSE_MODE),
        (course / "outbound", OUTBOUND_MODE),
        (course / "inbound", INBOUND_MODE),
    ):
        if path.is_dir():
            wrong = _mode_line(what, path, mode, me, sudo=path.stat().st_uid != me)
            if wrong:
                return wrong
    return Line(OK, what, f"{exchange}: 1777; {course_id}/ and outbound/ 0755, inbound/ 3733, yours")


def diagnose(course) -> list[Line]:
    """The instructor's lines, for ``course`` (a Course or its root; its nbgrader_config.py read
    with traitlets alone: the doctor runs where nbgrader is broken)."""
    from course_grading.course.config import jupyter_server_config
    from course_grading.course.course import Course

    course = Course.of(course)
    config = jupyter_server_config()
    lines = [check_csp_extension(config), check_framing(config)]
    root = course.root
    try:
        course = course.config
    except Exception as exc:  # noqa: BLE001 - a broken configuration: say so, check no further
        return lines + [
            Line(
                FAIL,
                "exchange",
                f"{root}/nbgrader_config.py cannot be read: {type(exc).__name__}: {str(exc)[:200]}",
                f"fix {root}/nbgrader_config.py",
            )
        ]
    exchange = Path(course.Exchange.get("root", "/srv/nbgrader/exchange"))
    course_id = str(course.CourseDirectory.get("course_id", "")) or "attention-course"
    lines.append(check_exchange(exchange, course_id, named="root" in course.Exchange))
    db_url = course.CourseDirectory.get("db_url", "")
    gradebook = check_gradebook(db_url, root) if db_url else None
    return lines + ([gradebook] if gradebook else [])


if __name__ == "__main__" and sys.argv[1:] == ["configure-server"]:
    print(f"wrote {configure_server()}")
