"""Several graders at once on one PostgreSQL gradebook.

A throw-away PostgreSQL server (Debian's `postgresql` package) is started on loopback, with its
socket in a temporary folder, and stopped at the end. Two `course autograde` processes grade
disjoint halves of a class at the same moment into it, one finding the database in
nbgrader_config.py, the other given `--db`; every grade must land exactly once and be right.
Then `course doctor --instructor` on a gradebook of a Debian cluster of the test's own: each
thing it checks broken in turn (the driver too, in a throw-away copy of the environment), and
the fix it printed run as it is.

Skipped (with the reason) where no PostgreSQL server binaries (for the doctor's test: Debian's,
and root) or no psycopg2 exist, except under CI, where it must run.
"""

from __future__ import annotations

import csv
import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import ASSIGNMENT, make_course, tiny_notebook
from course_grading.authoring.nbformat_tools import write_notebook

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
DB_NAME = "gradebook"
DB_USER = "grader"
SOLVED = {"ann", "bob", "cid", "dee"}
BLANK = {"eva", "fox"}
GRADER_A = ["ann", "bob", "eva"]
GRADER_B = ["cid", "dee", "fox"]


def _unavailable(reason: str):
    if os.environ.get("CI"):
        pytest.fail(f"{reason}: under CI the PostgreSQL test must run (scripts/setup.sh --test installs it)")
    pytest.skip(reason)


def _pg_bin() -> Path | None:
    """The folder of PostgreSQL's server programs: Debian keeps them off PATH."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    versions = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    return Path(versions[-1]).parent if versions else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def postgres_url():
    """``postgresql+psycopg2://grader@127.0.0.1:PORT/gradebook`` on a server of our own."""
    try:
        import psycopg2
    except ImportError:
        _unavailable("psycopg2 is not installed (pip install -e '.[postgres]')")
    pg_bin = _pg_bin()
    if pg_bin is None:
        _unavailable("no PostgreSQL server binaries (Debian: apt-get install postgresql)")
    as_user: list[str] = []
    folder = Path(tempfile.mkdtemp(prefix="course-pg-"))
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root: run it as the package's user
        try:
            import pwd

            account = pwd.getpwnam("postgres")
        except KeyError:
            shutil.rmtree(folder)
            _unavailable("running as root and there is no 'postgres' user to run the server as")
        os.chown(folder, account.pw_uid, account.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    data, port = folder / "data", _free_port()
    try:
        subprocess.run(
            [
                *as_user,
                str(pg_bin / "initdb"),
                "-D",
                str(data),
                "-U",
                DB_USER,
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        subprocess.run(
            [
                *as_user,
                str(pg_bin / "pg_ctl"),
                "-D",
                str(data),
                "-o",
                options,
                "-l",
                str(folder / "server.log"),
                "-w",
                "-t",
                "60",
                "start",
            ],
            check=True,
            capture_output=True,
            text=True,
        )
    except subprocess.CalledProcessError as exc:
        log = (folder / "server.log").read_text() if (folder / "server.log").exists() else ""
        shutil.rmtree(folder, ignore_errors=True)
        pytest.fail(f"could not start PostgreSQL: {exc.stderr}\n{log}")
    try:
        connection = psycopg2.connect(host="127.0.0.1", port=port, user=DB_USER, dbname="postgres")
        connection.autocommit = True
        connection.cursor().execute(f"CREATE DATABASE {DB_NAME}")
        connection.close()
        yield f"postgresql+psycopg2://{DB_USER}@127.0.0.1:{port}/{DB_NAME}"
    finally:
        subprocess.run(
            [*as_user, str(pg_bin / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"],
            capture_output=True,
        )
        shutil.rmtree(folder, ignore_errors=True)


def test_two_graders_at_once_share_one_postgres_gradebook(tmp_path, postgres_url):
    course = make_course(tmp_path / "course", {ASSIGNMENT: tiny_notebook()})
    blank = tiny_notebook(solution="def double(x):\n    raise NotImplementedError()\n")
    for student in SOLVED | BLANK:
        folder = course / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True)
        write_notebook(tiny_notebook() if student in SOLVED else blank, folder / f"{ASSIGNMENT}.ipynb")

    # Grader A reads the database from nbgrader_config.py, grader B is given it with --db.
    with (course / "nbgrader_config.py").open("a") as fh:
        fh.write(f"\nc.CourseDirectory.db_url = {postgres_url!r}\n")
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "MPLBACKEND": "Agg"}
    course_cmd = [str(BIN / "course"), "--root", str(course), "autograde", ASSIGNMENT, "--jobs", "1"]
    start = time.perf_counter()
    graders = [
        subprocess.Popen(
            [*course_cmd, "--csv", str(tmp_path / "a.csv"), "--student", *GRADER_A],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        ),
        subprocess.Popen(
            [*course_cmd, "--csv", str(tmp_path / "b.csv"), "--db", postgres_url, "--student", *GRADER_B],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        ),
    ]
    outputs = [g.communicate(timeout=120)[0] for g in graders]
    assert [g.returncode for g in graders] == [0, 0], "\n\n".join(outputs)
    seconds = time.perf_counter() - start
    assert not (course / "gradebook.db").exists(), "a grader fell back to the SQLite gradebook"

    for name, students in (("a.csv", GRADER_A), ("b.csv", GRADER_B)):
        rows = list(csv.DictReader((tmp_path / name).open()))
        assert {r["student"]: r["score"] for r in rows} == {s: "2" if s in SOLVED else "0" for s in students}

    # Every grade is in the shared gradebook exactly once, with the right score.
    from nbgrader.api import Gradebook

    with Gradebook(postgres_url, "attention-course") as gb:
        assert sorted(s.id for s in gb.students) == sorted(SOLVED | BLANK)
        assignment = gb.find_assignment(ASSIGNMENT)
        assert len(assignment.notebooks) == 1
        submissions = {s.student.id: s for s in assignment.submissions}
        assert sorted(submissions) == sorted(SOLVED | BLANK)
        for student, submission in submissions.items():
            grades = [g for nb in submission.notebooks for g in nb.grades]
            assert [(g.name, g.score, g.max_score) for g in grades] == [
                ("test_double", 2.0 if student in SOLVED else 0.0, 2.0)
            ], student
    import psycopg2

    with psycopg2.connect(postgres_url.replace("postgresql+psycopg2", "postgresql")) as connection:
        cursor = connection.cursor()
        cursor.execute("SELECT count(*) FROM grade")
        assert cursor.fetchone()[0] == len(SOLVED | BLANK)
        cursor.execute("SELECT count(*) FROM submitted_assignment")
        assert cursor.fetchone()[0] == len(SOLVED | BLANK)

    # The instructor's view of the whole class, from the shared gradebook.
    from course_grading.commands.cli import main

    assert main(["--root", str(course), "export", "--to", str(tmp_path / "export.csv")]) == 0
    exported = {r["student_id"]: float(r["score"]) for r in csv.DictReader((tmp_path / "export.csv").open())}
    assert exported == {s: 2.0 if s in SOLVED else 0.0 for s in SOLVED | BLANK}
    assert main(["--root", str(course), "report", "--db", postgres_url]) == 0
    report = list(csv.DictReader((course / "reports" / "class_report.csv").open()))
    assert [(r["exercise"], r["attempts"], r["passed"]) for r in report] == [("test_double", "6", "4")]
    # --db wins over nbgrader_config.py.
    other = tmp_path / "other.db"
    assert main(["--root", str(course), "report", "--db", f"sqlite:///{other}"]) == 2
    assert other.is_file()
    print(f"two graders, {len(SOLVED | BLANK)} submissions, one PostgreSQL gradebook: {seconds:.1f} s")


@pytest.fixture
def debian_cluster(monkeypatch):
    """A PostgreSQL cluster of Debian's (postgresql-common), created stopped, its configuration
    in a folder of the test's own (``PG_CLUSTER_CONF_ROOT``: pg_lsclusters and pg_ctlcluster
    see it, and no cluster of the machine's); (version, name, port). Dropped at the end."""
    if not shutil.which("pg_createcluster") or _pg_bin() is None:
        _unavailable("no Debian PostgreSQL (apt-get install postgresql)")
    if os.geteuid() != 0:
        _unavailable("the gradebook's fixes run PostgreSQL's commands as its user: root is needed")
    import pwd

    account = pwd.getpwnam("postgres")
    folder = Path(tempfile.mkdtemp(prefix="course-pg-"))  # not under tmp_path: postgres must reach it
    (folder / "socket").mkdir()
    for path in (folder, folder / "socket"):
        os.chown(path, account.pw_uid, account.pw_gid)
    monkeypatch.setenv("PG_CLUSTER_CONF_ROOT", str(folder / "conf"))
    version, name, port = Path(_pg_bin()).parent.name, "coursetest", _free_port()
    made = subprocess.run(
        [
            "pg_createcluster",
            version,
            name,
            "-p",
            str(port),
            "-d",
            str(folder / "data"),
            "-s",
            str(folder / "socket"),
            "-l",
            str(folder / "log"),
            "-o",
            f"external_pid_file='{folder / 'pid'}'",
            "-o",
            "fsync=off",
            "--",
            "--no-sync",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    try:
        if made.returncode != 0:
            pytest.fail(f"pg_createcluster: {made.stdout}{made.stderr}")
        yield version, name, port
    finally:
        for action in (
            ["pg_ctlcluster", version, name, "stop", "-m", "fast"],  # (dropcluster's
            ["pg_dropcluster", version, name],
        ):  # --stop leaves it running here)
            subprocess.run(action, capture_output=True, timeout=120)
        shutil.rmtree(folder, ignore_errors=True)


def test_each_gradebook_failure_is_made_ok_by_its_printed_fix(tmp_path, debian_cluster, capsys, monkeypatch):
    """`course doctor --instructor` on a PostgreSQL gradebook: the server stopped, then no role,
    a wrong password, no database, no pg_hba.conf line for this host, no right to create tables. Each time the fix printed is run
    as it is, in a shell, and the line is then OK (or, the server started, names the next thing)."""
    from sqlalchemy.engine import URL

    from course_grading.commands.cli import main
    from course_grading.commands.doctor_gradebook import check_gradebook

    version, name, port = debian_cluster
    password = "it's a s3cret"  # quoted through the URL, the SQL and psql
    url = URL.create(
        "postgresql+psycopg2",
        username="grader",
        password=password,
        host="127.0.0.1",
        port=port,
        database=DB_NAME,
    ).render_as_string(hide_password=False)
    course = make_course(tmp_path / "course", {})
    with (course / "nbgrader_config.py").open("a") as fh:
        fh.write(f"\nc.CourseDirectory.db_url = {url!r}\nc.Exchange.root = {str(tmp_path / 'exchange')!r}\n")

    def superuser(statement: str, database: str = "postgres") -> None:
        subprocess.run(
            [
                "runuser",
                "-u",
                "postgres",
                "--",
                "psql",
                "--cluster",
                f"{version}/{name}",
                "-v",
                "ON_ERROR_STOP=1",
                "-d",
                database,
                "-c",
                statement,
            ],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def fix(line, expect: str):
        assert line.status == "FAIL" and expect in line.detail, line
        assert password not in line.detail + line.fix
        done = subprocess.run(line.fix, shell=True, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"{line.fix}\n{done.stdout}{done.stderr}"
        return check_gradebook(url, course)

    started = time.perf_counter()
    main(["--root", str(course), "doctor", "--instructor"])  # the server is down: as printed
    printed = capsys.readouterr().out.splitlines()
    at = next(i for i, ln in enumerate(printed) if ln.startswith("FAIL  gradebook"))
    line = check_gradebook(url, course)
    assert printed[at + 1].strip() == f"fix: {line.fix}" == f"fix: pg_ctlcluster {version} {name} start"
    line = fix(line, "Connection refused")
    line = fix(line, 'password authentication failed for user "grader"')  # no such role yet
    assert line.status == "OK" and line.detail.endswith(
        "connected (nbgrader makes its tables when it first grades)"
    )

    superuser("ALTER ROLE grader PASSWORD 'another'")
    assert fix(check_gradebook(url, course), "password authentication failed").status == "OK"
    superuser(f"DROP DATABASE {DB_NAME}")
    assert fix(check_gradebook(url, course), f'database "{DB_NAME}" does not exist').status == "OK"
    hba = Path(os.environ["PG_CLUSTER_CONF_ROOT"]) / version / name / "pg_hba.conf"
    kept = [ln for ln in hba.read_text().splitlines() if not ln.startswith("host")]
    hba.write_text("\n".join(kept) + "\n")  # no line lets a TCP connection in any more
    subprocess.run(["pg_ctlcluster", version, name, "reload"], check=True, capture_output=True, timeout=60)
    line = check_gradebook(url, course)
    assert line.fix.startswith(f"echo 'host {DB_NAME} grader 127.0.0.1/32 scram-sha-256' | "), line
    assert fix(line, 'no pg_hba.conf entry for host "127.0.0.1"').status == "OK"
    assert hba.read_text().count("\nhost ") == 1  # that one line, for that database and user
    superuser(f"ALTER DATABASE {DB_NAME} OWNER TO postgres")  # made by another: no CREATE in public
    superuser("REVOKE ALL ON SCHEMA public FROM grader, PUBLIC", DB_NAME)
    assert fix(check_gradebook(url, course), "may not create nbgrader's tables").status == "OK"
    from nbgrader.api import Gradebook

    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")  # its alembic
    with Gradebook(url, "attention-course") as gb:  # nbgrader makes its tables
        assert gb.students == []
    line = check_gradebook(url, course)
    assert line.status == "OK" and "nbgrader's tables there" in line.detail
    print(f"six gradebook failures broken and fixed: {time.perf_counter() - started:.1f} s")
    started = time.perf_counter()
    _driver_is_put_back_by_its_fix(tmp_path, course)
    print(f"the driver uninstalled, then its files gone, each fixed: {time.perf_counter() - started:.1f} s")


def _driver_is_put_back_by_its_fix(tmp_path: Path, course: Path) -> None:
    """psycopg2 uninstalled, then its files gone with its package kept, in a throw-away copy
    of the course's environment: `course doctor --instructor` FAILs the gradebook line with
    a pip command (installing the course's pin, then reinstalling); run as printed, the
    doctor then connects."""
    import importlib.metadata

    import psycopg2

    import throwaway
    from course_grading.commands import doctor

    prefix, mount = throwaway.course(tmp_path)
    doctor_command = f'"{throwaway.COURSE}" --root "{course}" doctor --instructor'
    pip = f'"{sys.executable}" -m pip'
    pin = next(r for r in doctor._requirements("postgres") if r.name == "psycopg2-binary")
    for breaking, fix in (
        (
            f"{pip} uninstall -y psycopg2-binary",
            f"{sys.executable} -m pip install '{pin.name}{pin.specifier}'",
        ),
        (f'rm -r "{Path(psycopg2.__file__).parent}"', doctor.reinstall("psycopg2-binary")),
    ):
        found = throwaway.heal("gradebook", breaking, prefix, mount, doctor_command)
        assert "its driver does not import" in found["before"]["detail"], found["printed"]
        assert found["before"]["fix"] == fix
        assert throwaway.healed(found)["after"]["detail"].endswith("connected, nbgrader's tables there")
    assert importlib.metadata.version("psycopg2-binary")  # the machine's own environment untouched
