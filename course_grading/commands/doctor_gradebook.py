"""``course doctor --instructor``'s gradebook line, when ``CourseDirectory.db_url`` names a
PostgreSQL database: its driver imports, its server answers, its role logs in with the URL's
password, its database exists, and nbgrader's tables are there or the role may create them.

Each FAIL's fix is a command for this machine where one can be known:

* the driver missing: its ``pip install`` (psycopg2's at the course's ``postgres`` extra's pin),
  or its reinstall where it is installed with its files gone;
* the server not answering, on this machine: Debian's ``pg_ctlcluster`` for the cluster on the
  URL's port (``pg_lsclusters``), else ``systemctl start postgresql``; on another machine no
  command from here can start it, and the line says so;
* the role, its password, the database or the right to create tables missing: the SQL that
  makes them as the URL says (``python -m course_grading.commands.doctor_gradebook sql ROOT``:
  the password goes from nbgrader_config.py to psql through a pipe, never onto the screen),
  piped to ``psql`` as the server's superuser (``postgres`` on this machine, through Debian's
  ``--cluster`` where there is one);
* no pg_hba.conf line for this connection, on this machine's cluster: one line for exactly the
  URL's database, user and address appended to it, and the server reloaded.
"""

from __future__ import annotations

import getpass
import importlib.metadata as metadata
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from course_grading import system

from .doctor import FAIL, OK, Line, _requirements, reinstall

WHAT = "gradebook"
LOCAL_HOSTS = ("", "localhost", "127.0.0.1", "::1")
DRIVERS = {"psycopg": "psycopg[binary]"}  # a driver's module: its package, where the names differ


def check_gradebook(db_url: str, root: Path) -> Line | None:
    """The gradebook's line (None for SQLite: nothing to check)."""
    if not str(db_url).startswith("postgresql"):
        return None
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    url = make_url(db_url)
    shown = url.render_as_string(hide_password=True)
    try:
        engine = create_engine(db_url, connect_args={"connect_timeout": 5})
    except ImportError as exc:
        return Line(
            FAIL,
            WHAT,
            f"{shown}: its driver does not import ({exc}; the course's is psycopg2, "
            "named by postgresql+psycopg2://)",
            _driver(exc.name),
        )
    try:
        with engine.connect() as connection:
            tables, usage, create = connection.execute(
                text(
                    "SELECT EXISTS (SELECT FROM pg_tables WHERE schemaname = 'public' AND tablename = 'assignment'),"
                    " has_schema_privilege('public', 'USAGE'), has_schema_privilege('public', 'CREATE')"
                )
            ).one()
    except Exception as exc:  # noqa: BLE001 - the driver's own error says why
        return _unconnected(shown, exc, url, root)
    finally:
        engine.dispose()
    if tables and usage:
        return Line(OK, WHAT, f"{shown}: connected, nbgrader's tables there")
    if not (usage and create):
        return Line(
            FAIL,
            WHAT,
            f"{shown}: {url.username} may not {'use' if tables else 'create'} "
            "nbgrader's tables in the schema public",
            _create(url, root),
        )
    return Line(OK, WHAT, f"{shown}: connected (nbgrader makes its tables when it first grades)")


def _unconnected(shown: str, exc: Exception, url, root: Path) -> Line:
    """The line of a connection that did not open, with the fix for why."""
    first = (str(getattr(exc, "orig", None) or exc).strip().splitlines() or [type(exc).__name__])[0][:200]
    if not _answers(url):
        return Line(FAIL, WHAT, f"{shown}: {first}", _start(url))
    # libpq gives a refused connection no SQLSTATE: its message is all there is to tell the
    # server's rules (pg_hba.conf, the administrator's) from a role or database missing
    if "pg_hba.conf" in first:
        return Line(FAIL, WHAT, f"{shown}: {first}", _allow(url, first))
    return Line(
        FAIL,
        WHAT,
        f"{shown}: {first} (the fix makes the role, its password and the "
        "database as the URL says, as the server's superuser)",
        _create(url, root),
    )


def _driver(module: str | None) -> str:
    """The pip command that makes a driver's module import: its package installed (the course's
    own pin for psycopg2), or reinstalled at its version when installed with its files gone."""
    from packaging.requirements import Requirement

    if module == "psycopg2":
        pinned = [r for r in _requirements("postgres") if r.name.startswith("psycopg2")]
        wanted = pinned[0] if pinned else Requirement("psycopg2-binary")
    else:
        wanted = Requirement(DRIVERS.get(str(module), str(module)))
    try:
        metadata.version(wanted.name)
    except metadata.PackageNotFoundError:
        extras = f"[{','.join(sorted(wanted.extras))}]" if wanted.extras else ""
        return f"{sys.executable} -m pip install {shlex.quote(wanted.name + extras + str(wanted.specifier))}"
    return reinstall(wanted.name)


def _answers(url) -> bool:
    """Whether something listens where the URL points (a server, however it then answers)."""
    host, port = str(url.host or url.query.get("host") or ""), url.port or 5432
    if host.startswith("/") or not host:  # a socket folder; libpq's default ones for none
        for folder in [host] if host else ["/var/run/postgresql", "/tmp"]:
            with socket.socket(socket.AF_UNIX) as probe:
                probe.settimeout(5)
                if probe.connect_ex(os.path.join(folder, f".s.PGSQL.{port}")) == 0:
                    return True
        return False
    try:
        socket.create_connection((host, port), timeout=5).close()
    except OSError:
        return False
    return True


def _local(url) -> bool:
    host = url.host or url.query.get("host") or ""
    return str(host).startswith("/") or host in LOCAL_HOSTS


def _cluster(port: int) -> tuple[str, str, str, str] | None:
    """Debian's cluster on ``port``: (version, name, status, owner), from pg_lsclusters."""
    if not shutil.which("pg_lsclusters"):
        return None
    try:
        listed = subprocess.run(["pg_lsclusters", "-h"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for row in listed.splitlines():
        fields = row.split()
        if len(fields) >= 5 and fields[2] == str(port):
            return fields[0], fields[1], fields[3], fields[4]
    return None


def _start(url) -> str:
    where = f"{url.host or 'localhost'}:{url.port or 5432}"
    if not _local(url):
        return (
            f"none from here: the server at {where} runs on another machine; start it there, or "
            "fix the host and port of CourseDirectory.db_url in nbgrader_config.py"
        )
    cluster = _cluster(url.port or 5432)
    if cluster:
        return system.as_root(f"pg_ctlcluster {cluster[0]} {cluster[1]} start")
    if Path("/run/systemd/system").is_dir() and shutil.which("systemctl"):
        return system.as_root("systemctl start postgresql")
    if not (shutil.which("pg_ctl") or list(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))):
        return system.install("postgresql") or "install PostgreSQL's server"
    return (
        f"start the PostgreSQL server of port {url.port or 5432} as its owner (pg_ctl -D ITS_DATA_FOLDER "
        "start): no cluster of this machine's is known to be on that port"
    )


def _allow(url, refused: str) -> str:
    """The fix for a server with no pg_hba.conf line for this connection: on this machine's
    Debian cluster, one line for exactly this database, user and address (password checked:
    scram-sha-256) appended to the cluster's pg_hba.conf, then the server reloaded. A line of the
    administrator's that rejects it, or a server elsewhere, is theirs to change: said in words."""
    asked = re.search(r'no pg_hba\.conf entry for host "([^"]+)"', refused)
    cluster = _cluster(url.port or 5432) if _local(url) else None
    if not (asked and cluster and url.password and url.database and url.username):
        return (
            "the server refuses this host: add a line for "
            f"it to the server's pg_hba.conf (database {url.database}, user {url.username}), "
            "then reload the server (its configuration is the server's administrator's)"
        )
    version, name, _, owner = cluster
    host = asked.group(1)
    rule = ["local" if host == "[local]" else "host", url.database, url.username]
    if host != "[local]":
        rule.append(f"{host}/128" if ":" in host else f"{host}/32")
    hba = Path(os.environ.get("PG_CLUSTER_CONF_ROOT") or "/etc/postgresql") / version / name / "pg_hba.conf"
    append = system.as_user(owner, f"tee -a {shlex.quote(str(hba))}")
    reload = system.as_root(f"pg_ctlcluster {version} {name} reload")
    return f"echo {shlex.quote(' '.join([*rule, 'scram-sha-256']))} | {append} >/dev/null && {reload}"


def _create(url, root: Path) -> str:
    """The SQL of ``sql(url)``, piped into psql as the server's superuser."""
    produce = f"{sys.executable} -m course_grading.commands.doctor_gradebook sql {shlex.quote(str(root))}"
    psql = "psql -v ON_ERROR_STOP=1 -q -d postgres"
    port = url.port or 5432
    if not _local(url):
        return f"{produce} | {psql} -h {shlex.quote(url.host)} -p {port} -U postgres"  # its superuser
    cluster = _cluster(port)
    if cluster:
        return f"{produce} | {system.as_user(cluster[3], f'{psql} --cluster {cluster[0]}/{cluster[1]}')}"
    host = url.host or url.query.get("host")
    socket = f" -h {shlex.quote(str(host))}" if str(host or "").startswith("/") else ""
    return f"{produce} | {system.as_user('postgres', f'{psql}{socket} -p {port}')}"


def sql(db_url: str) -> str:
    """psql's input that makes the URL's role (with its password, when it has one), its
    database (the role's), and the role's right to create tables there; run it again, it
    changes nothing more."""
    from sqlalchemy.engine import make_url

    url = make_url(db_url)
    user = url.username or getpass.getuser()  # libpq's defaults: the user's name for both
    role, database = _literal(user), _literal(url.database or user)
    lines = [
        f"SELECT format('CREATE ROLE %I LOGIN', {role}) "
        f"WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = {role})\\gexec"
    ]
    if url.password is not None:
        lines.append(
            f"SELECT format('ALTER ROLE %I LOGIN PASSWORD %L', {role}, {_literal(url.password)})\\gexec"
        )
    lines += [
        f"SELECT format('CREATE DATABASE %I OWNER %I', {database}, {role}) "
        f"WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = {database})\\gexec",
        f"\\connect {_psql_word(url.database or user)}",
        f"SELECT format('GRANT ALL ON SCHEMA public TO %I', {role})\\gexec",
    ]
    return "\n".join(lines) + "\n"


def _literal(value: str) -> str:
    return "'" + str(value).replace("'", "''") + "'"


def _psql_word(value: str) -> str:
    """A database name as one argument of a psql backslash command."""
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def main(argv: list[str]) -> int:
    """``sql ROOT``: the SQL for the gradebook in ROOT's nbgrader_config.py, on stdout."""
    if len(argv) != 2 or argv[0] != "sql":
        print("usage: python -m course_grading.commands.doctor_gradebook sql COURSE_ROOT", file=sys.stderr)
        return 2
    from course_grading.course.course import Course
    from course_grading.errors import GradingError

    try:
        db_url = str(Course.of(Path(argv[1])).config.CourseDirectory.get("db_url", ""))
    except GradingError as exc:
        print(f"course: error: {exc}", file=sys.stderr)
        return 2
    if not db_url.startswith("postgresql"):
        print(f"course: error: {argv[1]}/nbgrader_config.py names no PostgreSQL gradebook", file=sys.stderr)
        return 2
    sys.stdout.write(sql(db_url))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
