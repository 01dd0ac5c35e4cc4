"""A class on a real JupyterHub: students fetch, work and submit in the browser; the instructor
collects, grades and returns feedback; the students read it, in the browser. And a student who
tries to pass for another, to replace the release or to look early, gets nowhere.

One hub for the module, on 127.0.0.1 only: JupyterHub with its proxy (configurable-http-proxy,
from npm into .node/ by scripts/setup.sh --test), a shared password, and JupyterHub's
LocalProcessSpawner: the hub runs as root and starts each user's server as the Unix user of the
same name (made for the test with useradd, removed afterwards), in that user's home folder
(0700). The students' servers run from the student side that `course build-student` writes
(the learner wheel installed into an environment of its own, with the students' nbgrader
settings and the same extensions disabled as its Dockerfile); the instructor's server runs from
the full course, with the course directory in the instructor's home. All servers see one
exchange folder, made by root 1777 as an administrator would; the course's nbgrader settings
collect with course_grading.exchange.OwnerCollect (the student is the owner of the submission,
its time the kernel's record of its last change). Where this Python lies out of other users'
reach (pyenv's, under /root), the hub and all it starts run in a mount namespace of their own in
which it is not (tests/unix_users.py), and what a user types runs there too.

In headless Chromium, ada and ben log in, open the Assignments tab, fetch 03_attention, open it
and write the exercises (ada all four, ben the first two, the second with the softmax over the
wrong dimension), run the notebook and see a visible test's message, and submit; ada's
notebook shows its widget, and the widget responds. mallory, a third student, types in a
terminal of their own server (the test runs the commands as mallory, with the environment of
mallory's server): tries to overwrite the release in outbound/ (denied; the release fetched
afterwards is the instructor's); once the due date has passed, submits a blank notebook as ben
(JUPYTERHUB_USER and --student set to ben), then their own work, back-dated (timestamp.txt,
mtimes and the folder's name), and leaves two folders whose names are no student id (HTML, and
bytes that are not UTF-8). The instructor runs `nbgrader collect`: ada's, ben's own and
mallory's submissions are collected, the rest refused by name (exit status 1), and `course
autograde` grades ben on ben's notebook and gives mallory's late work 0 (penalty_method 'zero').
The Formgrader tab shows the assignment and the submissions with the scores of
reports/grades.csv. The instructor runs `course feedback` and `nbgrader release_feedback`;
each student fetches the feedback in the Assignments tab and opens it: the score, the visible
messages, no hidden test.

Screenshots and the hub's log go to the test's tmp dir (``hub-*.png``, ``hub/jupyterhub.log``);
with ``COURSE_SCREENSHOTS=<folder>`` the pictures also go there, small, each entered in its
MANIFEST.json (tests/screenshot_manifest.py): that is how docs/screenshots/hub-*.png are made.
Skipped without root, chromium, playwright, JupyterHub or node and the proxy, except in CI,
where any of them missing is a failure.
"""

from __future__ import annotations

import csv
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import urllib.error
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pytest

from jupyter_browser import (
    CHROMIUM,
    FLAGS,
    ROOT,
    api,
    as_typed,
    control_values,
    filled_in,
    free_port,
    last_widget_with_picture,
    require_browser,
    require_or_skip,
    run_all_cells,
    solution_cells,
    some_control_changes_the_picture,
    wait_for_one_idle_kernel,
    wait_until_all_cells_ran,
    words_broken,
    write_instructor_config,
)
from screenshot_manifest import save as save_for_docs
from unix_users import as_user, create_user, give, passable_world, remove_user, require_users

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ASSIGNMENT = "03_attention"
COURSE_ID = "attention-course"
INSTRUCTOR = "instructor"
ATTACKER = "mallory"  # a student who types in a terminal of their own server; VICTIM's classmate
VICTIM = "ben"
PASSWORD = "attention-class-password"
# who writes what: the exercises (solution grade ids) each student fills in; ben's second one
# takes the softmax over the wrong dimension, a mistake the visible test names
WORK = {
    "ada": {
        "softmax": "solution",
        "simple_self_attention": "solution",
        "scaled_dot_product_attention": "solution",
        "causal_mask": "solution",
    },
    "ben": {"softmax": "solution", "simple_self_attention": "softmax_over_dim_minus_2"},
}
STUDENTS = [*WORK, ATTACKER]
# nobody answers the two written questions (graded by hand): each scores 0, "not answered"
UNANSWERED = {"written_sqrt_dk": 0, "written_mask_before_softmax": 0}
EXPECTED = {
    "ada": {
        "test_softmax": 2,
        "test_simple_self_attention": 2,
        "test_scaled_dot_product_attention": 3,
        "test_causal_mask": 1,
        **UNANSWERED,
    },
    "ben": {
        "test_softmax": 2,
        "test_simple_self_attention": 0,
        "test_scaled_dot_product_attention": 0,
        "test_causal_mask": 0,
        **UNANSWERED,
    },
    # mallory writes softmax, and submits after the due date: 2 points, less all of them
    ATTACKER: {
        "test_softmax": 2,
        "test_simple_self_attention": 0,
        "test_scaled_dot_product_attention": 0,
        "test_causal_mask": 0,
        **UNANSWERED,
    },
}
LATE = {ATTACKER}
NAMES = {"ada": ("Ada", "Lovelace"), "ben": ("Ben", "Okafor"), ATTACKER: ("Mallory", "Mallet")}
MAX_SCORE = 12  # 8 of tests, 4 of written answers
# what each student sees under a test cell after running the notebook
SEEN = {
    "ada": "scaled_dot_product_attention: all visible checks passed.",
    "ben": "simple_self_attention: the weights are transposed",
}
# hidden tests' source, and what the hidden checks print
HIDDEN = ("BEGIN HIDDEN TESTS", "hidden=True", "hidden checks")
EARLY = "2020-01-01 00:00:00.000000 UTC"  # the time mallory writes everywhere
EARLY_EPOCH = 1577836800
CHP = ROOT / ".node" / "node_modules" / ".bin" / "configurable-http-proxy"
LIMIT_S = 60  # any one wait for the hub, a server or a page


def _require_hub() -> None:
    """Skip (fail in CI) without what the test needs."""
    require_browser()
    try:
        import jupyterhub  # noqa: F401 - whether jupyterhub is installed
    except ImportError:
        require_or_skip("JupyterHub is not installed (scripts/setup.sh --test installs it)")
    if not shutil.which("node"):
        require_or_skip(
            "no node on this machine: install Node.js and npm, then run "
            "scripts/setup.sh --test, to run the JupyterHub test"
        )
    if not CHP.exists():
        require_or_skip(
            f"no configurable-http-proxy at {CHP.relative_to(ROOT)}: "
            "scripts/setup.sh --test installs it with npm"
        )
    require_users()


# --------------------------------------------------------------------------- the student side


def _variant(grade_id: str, name: str) -> str:
    """A buggy implementation from tests/variants/, as the student types it."""
    from harness import load_variants

    module = load_variants(ROOT / "tests" / "variants" / f"{ASSIGNMENT}.py")
    return module.BUGGY[f"test_{grade_id}"][name].strip("\n")


def _answer(grade_id: str, how: str) -> str:
    return as_typed(solution_cells(ASSIGNMENT)[grade_id]) if how == "solution" else _variant(grade_id, how)


def student_environment(student_side: Path, env: Path) -> Path:
    """What the students' image holds, as a virtual environment at ``env``: the learner wheel
    installed by pip, the students' nbgrader settings in its etc/jupyter, the extensions the
    Dockerfile disables disabled. The third-party packages (torch, JupyterLab, nbgrader, ...)
    are this environment's, reached through links, without the course's own package (the
    instructor side) among them. Returns the environment's python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=120)
    python = env / "bin" / "python"
    wheels = list((student_side / "wheels").glob("*.whl"))
    assert len(wheels) == 1, wheels
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            str(wheels[0]),
        ],
        check=True,
        timeout=300,
    )
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.strip()
    )
    ours = Path(sysconfig.get_paths()["purelib"])
    for entry in ours.iterdir():
        if (
            entry.name.startswith(("attention_course", "__editable__", "course_"))
            or (site / entry.name).exists()
        ):
            continue
        (site / entry.name).symlink_to(entry)
    (env / "share").mkdir(exist_ok=True)
    (env / "share" / "jupyter").symlink_to(Path(sys.prefix) / "share" / "jupyter")
    shutil.copytree(Path(sys.prefix) / "etc" / "jupyter", env / "etc" / "jupyter")
    shutil.copy(student_side / "nbgrader_config.py", env / "etc" / "jupyter" / "nbgrader_config.py")
    dockerfile = (student_side / "Dockerfile").read_text(encoding="utf-8")
    disabled = re.findall(r"jupyter (labextension|server extension) disable \S+ (\S+)", dockerfile)
    assert disabled, "the Dockerfile disables no extension: the students would get the Formgrader"
    for kind, name in disabled:
        module = (
            "jupyterlab.labextensions"
            if kind == "labextension"
            else "jupyter_server.extension.serverextension"
        )
        level = "--level=sys_prefix" if kind == "labextension" else "--sys-prefix"
        subprocess.run(
            [str(python), "-m", module, "disable", level, name], check=True, capture_output=True, timeout=120
        )
    return python


def _imports(python: Path, module: str) -> bool:
    """Whether ``python`` (run outside the checkout) can import ``module``."""
    return (
        subprocess.run(
            [str(python), "-c", f"import {module}"], cwd=python.parent, capture_output=True, timeout=120
        ).returncode
        == 0
    )


# --------------------------------------------------------------------------- the hub

HUB_CONFIG = """\
from pathlib import Path

c = get_config()  # noqa: F821 - traitlets defines get_config in a configuration file
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {port}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {hub_port}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{proxy_api_port}"
c.ConfigurableHTTPProxy.command = [{chp!r}]
c.ConfigurableHTTPProxy.pid_file = {state!r} + "/proxy.pid"
c.JupyterHub.db_url = "sqlite:///" + {state!r} + "/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = {state!r} + "/cookie_secret"
c.JupyterHub.authenticator_class = "shared-password"
c.SharedPasswordAuthenticator.user_password = {password!r}
c.Authenticator.allowed_users = {users!r}
# each user's server runs as the Unix user of the same name, in its home folder
c.JupyterHub.spawner_class = "localprocess"
c.Spawner.default_url = "/lab"
c.Spawner.env_keep = ["LANG", "LC_ALL"]
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120
c.JupyterHub.services = [{{"name": "class-test", "api_token": {token!r}}}]
c.JupyterHub.load_roles = [{{"name": "class-test", "services": ["class-test"],
                             "scopes": ["admin:users", "admin:servers", "admin:server_state",
                                        "access:servers"]}}]

PYTHONS = {pythons!r}


def pre_spawn_hook(spawner):
    # the instructor's server runs from the full course, the students' from the student side
    python = PYTHONS.get(spawner.user.name, PYTHONS["*"])
    spawner.cmd = [python, "-m", "jupyterhub.singleuser"]
    spawner.environment["PATH"] = str(Path(python).parent) + ":/usr/bin:/bin"


c.Spawner.pre_spawn_hook = pre_spawn_hook
"""


@dataclass
class Hub:
    url: str
    token: str
    state: Path
    homes: Path
    course: Path
    exchange: Path
    shots: Path
    proc: subprocess.Popen
    users: dict
    pythons: dict
    world: int | None  # the process whose mount namespace the users' processes run in
    peaks: dict = field(default_factory=dict)

    def server(self, user: str) -> str:
        return f"{self.url}/user/{user}"

    def server_processes(self, user: str):
        """The processes of ``user``'s server: the server and its kernels."""
        import psutil

        model = api(f"{self.url}/hub/api/users/{user}", self.token)
        pid = model["servers"][""]["state"]["pid"]
        server = psutil.Process(pid)
        return [server, *server.children(recursive=True)]

    def python(self, user: str) -> str:
        return self.pythons.get(user, self.pythons["*"])


def wait_for_server(hub: Hub, user: str) -> None:
    deadline = time.time() + 2 * LIMIT_S
    while not api(f"{hub.url}/hub/api/users/{user}", hub.token)["servers"].get("", {}).get("ready"):
        assert time.time() < deadline, f"{user}'s server did not start; see {hub.state / 'jupyterhub.log'}"
        time.sleep(0.5)


def terminal(
    hub: Hub, user: str, *command: str, env: dict | None = None, cwd: Path | None = None, status: int = 0
) -> str:
    """``command`` typed in a terminal of ``user``'s server: run as that Unix user, with the
    server's own environment (and ``env``), in the user's home (or ``cwd``). Its output; the
    exit status must be ``status``."""
    wait_for_server(hub, user)
    server = hub.server_processes(user)[0]
    environment = {**server.environ(), "TERM": "xterm", **(env or {})}
    program = shutil.which(command[0], path=environment["PATH"]) or command[0]
    done = as_user(
        hub.world,
        hub.users[user],
        [program, *command[1:]],
        cwd=cwd or hub.homes / user,
        env=environment,
        timeout=600,
    )
    output = done.stdout + done.stderr
    assert done.returncode == status, f"{user}$ {' '.join(command)} (exit {done.returncode}):\n{output}"
    return output


def instructor(hub: Hub, *command: str, status: int = 0) -> str:
    """One of the instructor's commands, typed in the course directory in a terminal of the
    instructor's server; returns its output."""
    return terminal(hub, INSTRUCTOR, *command, cwd=hub.course, status=status)


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    _require_hub()
    from course_grading.commands.cli import main

    # What the test keeps (screenshots, the hub's state and log) in its tmp dir; what other
    # users must reach (homes, exchange, environments) in a folder they can pass through.
    kept = tmp_path_factory.mktemp("hub")
    state, shots = kept / "hub", kept / "screenshots"
    for folder in (state, shots):
        folder.mkdir()
    top = Path(tempfile.mkdtemp(prefix="attention-hub-"))
    top.chmod(0o755)
    homes, exchange = top / "home", top / "exchange"
    homes.mkdir()
    users = {}
    proc = log = None
    try:
        for name in (INSTRUCTOR, *STUDENTS):
            users[name] = create_user(name, homes / name)
        # The exchange, as an administrator makes it: writable by all, sticky (nobody may
        # rename or remove another's folder in it).
        exchange.mkdir()
        exchange.chmod(0o1777)

        # The instructor's course directory (this repository) in the instructor's home, with
        # the exchange's place in its nbgrader settings and late work scored 0; the students'
        # side built from it.
        course = homes / INSTRUCTOR / "attention-course"
        for part in ("solutions", "notebooks"):
            shutil.copytree(
                ROOT / part, course / part, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__")
            )
        for part in ("nbgrader_config.py", "pyproject.toml", "scripts/constraints.txt"):
            (course / part).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / part, course / part)
        with (course / "nbgrader_config.py").open("a", encoding="utf-8") as config:
            config.write(
                f'\nc.Exchange.root = {str(exchange)!r}\nc.LateSubmissionPlugin.penalty_method = "zero"\n'
            )
        write_instructor_config(homes / INSTRUCTOR / ".jupyter", course)
        assert main(["--root", str(course), "build-student", str(top / "student-side")]) == 0
        student_python = student_environment(top / "student-side", top / "student-env")
        assert not _imports(student_python, "course_grading"), "the students can import the grading side"

        for name, user in users.items():  # nobody is asked about Jupyter's news feed (no internet)
            settings = (
                homes / name / ".jupyter" / "lab" / "user-settings" / "@jupyterlab" / "apputils-extension"
            )
            settings.mkdir(parents=True, exist_ok=True)
            (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
            give(homes / name, user)

        port, token = free_port(), os.urandom(16).hex()
        pythons = {INSTRUCTOR: sys.executable, "*": str(student_python)}
        (state / "jupyterhub_config.py").write_text(
            HUB_CONFIG.format(
                port=port,
                hub_port=free_port(),
                proxy_api_port=free_port(),
                chp=str(CHP),
                state=str(state),
                password=PASSWORD,
                users=set(users),
                token=token,
                pythons=pythons,
            ),
            encoding="utf-8",
        )
        env = {
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(state),
            "LANG": os.environ.get("LANG", "C.UTF-8"),
        }
        log = open(state / "jupyterhub.log", "w")  # read it when the test fails
        # where this Python lies out of other users' reach, the hub and all it starts run where
        # they can reach it (a mount namespace of their own; nothing changes outside it)
        world = passable_world()
        proc = subprocess.Popen(
            [*world, sys.executable, "-m", "jupyterhub", "-f", str(state / "jupyterhub_config.py")],
            cwd=state,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        hub = Hub(
            f"http://127.0.0.1:{port}",
            token,
            state,
            homes,
            course,
            exchange,
            shots,
            proc,
            users,
            pythons,
            proc.pid if world else None,
        )
        deadline = time.time() + LIMIT_S
        while True:
            try:
                api(f"{hub.url}/hub/api/", token)
                break
            except (OSError, urllib.error.URLError):
                if proc.poll() is not None or time.time() > deadline:
                    pytest.fail(f"JupyterHub did not start; see {state / 'jupyterhub.log'}")
                time.sleep(0.5)
        yield hub
    finally:
        if proc is not None:
            _stop(proc)
        if log is not None:
            log.close()
        for name in users:
            remove_user(name)
        shutil.rmtree(top, ignore_errors=True)


def _stop(proc: subprocess.Popen) -> None:
    """Stop the hub, which stops the users' servers and the proxy; then anything of it left."""
    import psutil

    try:
        started = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        started = []
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    _, alive = psutil.wait_procs(started, timeout=15)
    for p in alive:
        p.kill()
    psutil.wait_procs(alive, timeout=5)


# --------------------------------------------------------------------------- mallory's terminal

# Against the release: overwrite it, add to outbound/, rename the course's folder away (to put
# one of one's own in its place), rename outbound/ away. Prints one word per attempt.
AGAINST_THE_RELEASE = """
import os, sys
exchange, course, assignment = sys.argv[1:]
top = os.path.join(exchange, course)
outbound = os.path.join(top, "outbound")
def attempt(f):
    try:
        f()
        return "done"
    except PermissionError:
        return "denied"
print(attempt(lambda: open(os.path.join(outbound, assignment, assignment + ".ipynb"), "w").write("{}")),
      attempt(lambda: os.mkdir(os.path.join(outbound, "mine"))),
      attempt(lambda: os.rename(top, os.path.join(exchange, "old"))),
      attempt(lambda: os.rename(outbound, os.path.join(top, "old"))))
"""

# Back-date a submission in inbound/ (mallory's own folder): its timestamp.txt, every mtime,
# and the time in its name. Prints the new name.
BACK_DATE = """
import os, sys
folder, early, epoch = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open(os.path.join(folder, "timestamp.txt"), "w") as fh:
    fh.write(early)
for here, folders, files in os.walk(folder):
    for name in files + folders:
        os.utime(os.path.join(here, name), (epoch, epoch))
os.utime(folder, (epoch, epoch))
student, assignment, _, random = os.path.basename(folder).split("+")
moved = os.path.join(os.path.dirname(folder), "+".join([student, assignment, early, random]))
os.rename(folder, moved)
os.utime(moved, (epoch, epoch))
print(moved)
"""

# Folders in inbound/ whose names are no student id: HTML, and bytes that are not UTF-8.
ODD_NAMES = """
import os, sys
inbound, assignment, early = sys.argv[1:]
for student in ("<img src=x onerror=alert(1)>".encode(), b"\\xff\\xfe"):
    name = b"+".join([student, assignment.encode(), early.encode(), b"odd"])
    folder = os.path.join(os.fsencode(inbound), name)
    os.mkdir(folder)
    with open(os.path.join(folder, (assignment + ".ipynb").encode()), "w") as fh:
        fh.write("{}")
"""


# --------------------------------------------------------------------------- in the browser


class MemoryWatch(threading.Thread):
    """The peak of the memory (resident sets) of a user's server and its kernels together,
    sampled every 0.2 s."""

    def __init__(self, hub: Hub, user: str):
        super().__init__(daemon=True)
        self.server = hub.server_processes(user)[0]
        self.peak, self._stop_event = 0, threading.Event()

    def run(self):
        import psutil

        while not self._stop_event.is_set():
            total = 0
            for p in {self.server, *self.server.children(recursive=True)}:
                try:
                    total += p.memory_info().rss
                except psutil.Error:  # a process that ended meanwhile
                    pass
            self.peak = max(self.peak, total)
            self._stop_event.wait(0.2)

    def stop(self) -> int:
        self._stop_event.set()
        self.join(5)
        return self.peak


def log_in(browser, hub: Hub, user: str):
    """A page of ``user``'s own browser, logged in, on JupyterLab in the user's server."""
    page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
    page.set_default_timeout(LIMIT_S * 1000)
    page.goto(f"{hub.url}/hub/login")
    page.fill("#username_input", user)
    page.fill("#password_input", PASSWORD)
    page.click("#login_submit")
    page.wait_for_url(re.compile(rf".*/user/{user}/lab.*"), timeout=120_000)
    page.wait_for_selector("#jp-main-dock-panel", timeout=120_000)
    return page


def nbgrader_menu(page) -> list[str]:
    """Open the Nbgrader menu; the commands it shows."""
    page.click("#jp-menu-panel .lm-MenuBar-itemLabel:text-is('Nbgrader')")
    items = page.locator("#jp-mainmenu-nbgrader li[data-command]:visible")
    items.first.wait_for()
    return [i.get_attribute("data-command") for i in items.all()]


def open_from_nbgrader_menu(page, command: str) -> None:
    if not page.locator("#jp-mainmenu-nbgrader").is_visible():
        nbgrader_menu(page)
    page.click(f"#jp-mainmenu-nbgrader li[data-command='nbgrader:{command}']")


def assignment_rows(page, which: str, count: int):
    """The rows of the Assignments tab's list ``which`` (released, fetched, submitted), once
    it has ``count`` of them."""
    page.wait_for_function(
        f"() => document.querySelectorAll('#{which}_assignments_list > .list_item').length === {count}"
    )
    return page.locator(f"#{which}_assignments_list > .list_item")


def write_exercise(page, grade_id: str, source: str) -> None:
    """Select everything in the exercise's cell and type ``source`` in its place."""
    cell = page.locator(".jp-CodeCell").filter(has_text=f"def {grade_id}(").first
    cell.scroll_into_view_if_needed()
    cell.locator(".cm-content").click()
    page.keyboard.press("ControlOrMeta+a")
    page.keyboard.insert_text(source)


# the pictures docs/screenshots/ shows (COURSE_SCREENSHOTS); the others stay in the tmp dir
FOR_DOCS = {
    "hub-assignments",
    "hub-ada-test",
    "hub-ben-test",
    "hub-ada-widget",
    "hub-formgrader",
    "hub-ben-feedback",
    "hub-ben-feedback-message",
}


def shoot(hub: Hub, page, name: str, **state) -> None:
    """``page`` as ``name``.png in the test's tmp dir and, small, in COURSE_SCREENSHOTS when
    it is one of ``FOR_DOCS`` (a picture of the assignment's notebook, in ``state``)."""
    path = hub.shots / f"{name}.png"
    page.screenshot(path=str(path))
    if name in FOR_DOCS:
        save_for_docs(
            lambda copy: shutil.copy(path, copy), name, f"notebooks/{ASSIGNMENT}/{ASSIGNMENT}.ipynb", state
        )


def save(page) -> None:
    page.keyboard.press("ControlOrMeta+s")
    page.wait_for_function("() => !document.querySelector('.lm-TabBar-tab.jp-mod-dirty')")


def to_the_middle(locator) -> None:
    """Scroll ``locator`` to the middle of its page, again as cells off screen take their real
    height (JupyterLab lays out only what is visible), until it lies whole inside the window."""
    for _ in range(20):
        locator.evaluate("e => e.scrollIntoView({block: 'center'})")
        locator.page.wait_for_timeout(300)
        if in_view(locator):
            return
    raise AssertionError(f"{locator} never came into view: the screenshot would not show it")


IN_VIEW = (
    "e => { const r = e.getBoundingClientRect(); let w = window;"
    " return r.height > 0 && r.top >= 0 && r.bottom <= w.innerHeight && r.left >= 0"
    " && r.right <= w.innerWidth; }"
)


def in_view(locator) -> bool:
    """Whether ``locator`` is whole inside its page's window (in its frame's own window for an
    element inside an iframe that fills the page's area)."""
    return bool(locator.evaluate(IN_VIEW))


def settled(hub: Hub, student: str, page, image) -> None:
    """Wait until the kernel is idle and the picture ``image`` has stopped changing (a slider
    moved by several steps redraws once per step), so that the controls, the picture and the
    kernel's status agree in a screenshot."""
    wait_for_one_idle_kernel(hub.server(student), hub.token)
    last, stable = image.get_attribute("src"), 0
    while stable < 4:
        page.wait_for_timeout(500)
        now = image.get_attribute("src")
        stable, last = (stable + 1, last) if now == last else (0, now)
    page.wait_for_function(
        "() => { const bar = document.querySelector('#jp-main-statusbar');"
        " return !bar || !/\\|\\s*Busy/.test(bar.innerText); }",
        timeout=LIMIT_S * 1000,
    )


def student_starts(hub: Hub, browser, student: str):
    """``student`` logs in, fetches the assignment, opens it, writes the exercises and runs the
    notebook. Returns the student's page and the watch on the server's memory."""
    page = log_in(browser, hub, student)
    commands = nbgrader_menu(page)
    assert "nbgrader:open-assignment-list" in commands
    assert not {"nbgrader:open-formgrader", "nbgrader:open-course-list"} & set(commands), commands
    assert not page.locator(".lm-TabBar-tab:has-text('Create Assignment')").count()
    open_from_nbgrader_menu(page, "open-assignment-list")
    released = assignment_rows(page, "released", 1)
    assert released.first.locator(".item_name").inner_text().strip() == ASSIGNMENT
    if student == "ada":
        shoot(hub, page, "hub-assignments", user=student, tab="Assignments")
    released.first.locator(".item_status button:text('Fetch')").click()
    fetched = assignment_rows(page, "fetched", 1)
    fetched.first.locator(f"a:text('{ASSIGNMENT}')").first.click()  # unfolds its notebooks
    page.locator(f"#fetched_assignments_list a:text-is('{ASSIGNMENT}')").last.click()
    page.wait_for_selector(".jp-Notebook .jp-CodeCell")
    wait_for_one_idle_kernel(hub.server(student), hub.token)
    watch = MemoryWatch(hub, student)
    watch.start()
    for grade_id, how in WORK[student].items():
        write_exercise(page, grade_id, _answer(grade_id, how))
    save(page)
    run_all_cells(page)
    return page, watch


def student_finishes(hub: Hub, student: str, page, watch):
    """``student`` sees the visible tests' verdict (and ada the widget), saves and submits."""
    message = page.locator(".jp-OutputArea-output").filter(has_text=SEEN[student]).first
    message.wait_for(timeout=180_000)
    if student == "ada":  # every cell ran; the widget renders and responds
        wait_until_all_cells_ran(page)
        widget, image = last_widget_with_picture(page)
        assert some_control_changes_the_picture(page, widget, image, image.get_attribute("src")), (
            "no control of the widget changed its picture"
        )
        settled(hub, student, page, image)
        to_the_middle(widget)
        shoot(hub, page, "hub-ada-widget", user=student, controls=control_values(widget))
    else:  # the run stopped at the failing test
        wait_for_one_idle_kernel(hub.server(student), hub.token)
    hub.peaks[student] = watch.stop()
    to_the_middle(message)
    assert not words_broken(message), words_broken(message)  # lines break between words
    shoot(hub, page, f"hub-{student}-test", user=student, exercises=WORK[student], then="Run All Cells")
    save(page)
    page.click(".lm-TabBar-tab:has-text('Assignments')")
    fetched = assignment_rows(page, "fetched", 1)
    fetched.first.locator(".item_status button:text('Submit')").click()
    submitted = assignment_rows(page, "submitted", 1)
    assert submitted.first.locator(".item_name").first.inner_text().strip() == ASSIGNMENT


def formgrader_scores(hub: Hub, browser, count: int) -> dict:
    """The instructor opens the Formgrader tab, then the assignment's submissions (``count``
    of them); the score shown for each student."""
    page = log_in(browser, hub, INSTRUCTOR)
    open_from_nbgrader_menu(page, "open-formgrader")
    formgrader = page.frame_locator("iframe").first
    formgrader.locator("tr", has_text=ASSIGNMENT).first.locator("td.num-submissions a").click()
    rows = formgrader.locator("tr:has(td.student-id)")
    rows.first.wait_for()
    page.wait_for_function(  # every row, each with its score
        "() => { const f = document.querySelector('iframe');"
        " const cells = f && f.contentDocument ? [...f.contentDocument.querySelectorAll('td.score')] : [];"
        f" return cells.length === {count} && cells.every(c => c.textContent.includes('/')); }}"
    )
    to_the_middle(rows.first)
    shoot(hub, page, "hub-formgrader", user=INSTRUCTOR, tab="Formgrader, Manage Submissions")
    return {
        r.locator("td.student-id").inner_text().strip(): (
            r.locator("td.student-name").inner_text().strip(),
            r.locator("td.score").inner_text().strip(),
        )
        for r in rows.all()
    }


def feedback_seen(hub: Hub, page, student: str) -> str:
    """``student`` fetches the feedback in the Assignments tab and opens it; its text."""
    page.click(".lm-TabBar-tab:has-text('Assignments')")
    page.click("#refresh_assignments_list")
    submitted = assignment_rows(page, "submitted", 1)
    submitted.first.locator(".item_status button:text('Fetch Feedback')").click()
    page.locator("#submitted_assignments_list a:text('(view feedback)')").first.click()
    page.locator(".jp-DirListing-item", has_text=f"{ASSIGNMENT}.html").dblclick()
    body = page.frame_locator(".jp-HTMLViewer iframe").first.locator("body")
    body.locator("text=Score").first.wait_for()
    shoot(hub, page, f"hub-{student}-feedback", user=student, opened="feedback")
    message = body.locator("pre, .output_text").filter(has_text=SEEN[student]).first
    to_the_middle(message)
    # the whole message shows, wrapped at the page's edge (FeedbackStyle), its hint included
    assert message.evaluate("e => e.scrollWidth <= e.clientWidth + 1"), (
        "the message runs past the page's edge"
    )
    assert not words_broken(message), words_broken(message)
    shoot(hub, page, f"hub-{student}-feedback-message", user=student, opened="feedback")
    return body.inner_text()


def test_a_class_on_jupyterhub(hub):
    import nbformat
    from playwright.sync_api import sync_playwright

    for user in [*STUDENTS, INSTRUCTOR]:  # the users' servers start meanwhile
        api(f"{hub.url}/hub/api/users/{user}/server", hub.token, method="POST", timeout=LIMIT_S)
    inbound = hub.exchange / COURSE_ID / "inbound"
    release = hub.course / "notebooks" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"

    # Instructor: release the assignment into the exchange.
    instructor(hub, "course", "release", ASSIGNMENT)
    instructor(hub, "nbgrader", "release_assignment", ASSIGNMENT)
    outbound = hub.exchange / COURSE_ID / "outbound" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    assert outbound.read_bytes() == release.read_bytes()
    # the course's folder and outbound/ are the instructor's alone; students may drop into
    # inbound but neither list it nor move what others dropped (sticky)
    owner = hub.users[INSTRUCTOR].pw_uid
    for folder, mode in (
        (COURSE_ID, 0o755),
        (f"{COURSE_ID}/outbound", 0o755),
        (f"{COURSE_ID}/inbound", 0o3733),
    ):
        info = (hub.exchange / folder).stat()
        assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (owner, mode), folder

    # mallory, in a terminal: cannot replace the release; what is fetched is the instructor's.
    attempts = terminal(
        hub,
        ATTACKER,
        hub.python(ATTACKER),
        "-c",
        AGAINST_THE_RELEASE,
        str(hub.exchange),
        COURSE_ID,
        ASSIGNMENT,
    )
    assert attempts.split() == ["denied"] * 4, attempts
    terminal(hub, ATTACKER, hub.python(ATTACKER), "-m", "nbgrader", "fetch_assignment", ASSIGNMENT)
    assert (hub.homes / ATTACKER / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_bytes() == release.read_bytes()

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            # Students: log in, fetch, write, run (their kernels run side by side), submit.
            started = {student: student_starts(hub, browser, student) for student in WORK}
            for student, (page, watch) in started.items():
                student_finishes(hub, student, page, watch)
            pages = {student: page for student, (page, _) in started.items()}
            for student in WORK:  # the students' servers serve no Formgrader
                with pytest.raises(urllib.error.HTTPError, match="404"):
                    api(f"{hub.server(student)}/formgrader/api/assignments", hub.token)

            # What was submitted is what each student wrote, under the student's name, theirs.
            submitted = {
                p.name.split("+")[0]: pwd.getpwuid(p.stat().st_uid).pw_name for p in inbound.iterdir()
            }
            assert submitted == {s: s for s in WORK}
            for student, work in WORK.items():
                nb = nbformat.read(str(hub.homes / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"), 4)
                written = {
                    c.metadata["nbgrader"]["grade_id"]: c.source
                    for c in nb.cells
                    if c.metadata.get("nbgrader", {}).get("solution")
                }
                for grade_id, how in work.items():
                    assert written[grade_id].strip() == _answer(grade_id, how).strip(), (student, grade_id)

            # The due date passes (the instructor sets it to now).
            due = datetime.now(timezone.utc).replace(tzinfo=None)
            instructor(
                hub, "nbgrader", "db", "assignment", "add", ASSIGNMENT, f"--duedate={due.isoformat()} UTC"
            )

            # mallory, in a terminal: submits the blank release as ben, then their own work
            # (softmax), back-dated, and leaves folders named with no student id.
            terminal(
                hub,
                ATTACKER,
                hub.python(ATTACKER),
                "-m",
                "nbgrader",
                "submit",
                ASSIGNMENT,
                f"--student={VICTIM}",
                env={"JUPYTERHUB_USER": VICTIM},
            )
            give(
                filled_in(ASSIGNMENT, hub.homes / ATTACKER / ASSIGNMENT, written={"softmax"}),
                hub.users[ATTACKER],
            )
            said = terminal(hub, ATTACKER, hub.python(ATTACKER), "-m", "nbgrader", "submit", ASSIGNMENT)
            mine = re.search(r"Destination: (\S+\+\S+ \S+ \S+\+\S+)", said).group(1)
            terminal(hub, ATTACKER, hub.python(ATTACKER), "-c", BACK_DATE, mine, EARLY, str(EARLY_EPOCH))
            terminal(hub, ATTACKER, hub.python(ATTACKER), "-c", ODD_NAMES, str(inbound), ASSIGNMENT, EARLY)

            # Instructor: collect (what claims another student, or no student id, is refused by
            # name, loudly) and grade.
            said = instructor(hub, "nbgrader", "collect", ASSIGNMENT, status=1)
            assert f"claims to be submitted by '{VICTIM}' but belongs to '{ATTACKER}'" in said, said
            assert "'<img src=x onerror=alert(1)>+03_attention+" in said, said
            assert "'\\xff\\xfe+03_attention+" in said and "is not valid UTF-8" in said, said
            assert "3 submission(s) of '03_attention' refused" in said, said
            collected = hub.course / "submitted"
            assert sorted(p.name for p in collected.iterdir()) == sorted(STUDENTS)
            for student in STUDENTS:  # each graded on their own notebook (ben too)
                assert (collected / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_bytes() == (
                    hub.homes / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
                ).read_bytes(), student
            # the time is the exchange's record of the last change, not what mallory wrote
            stamped = (collected / ATTACKER / ASSIGNMENT / "timestamp.txt").read_text()
            assert stamped != EARLY and datetime.strptime(stamped, "%Y-%m-%d %H:%M:%S.%f %Z") > due, stamped

            instructor(hub, "course", "autograde", ASSIGNMENT)
            rows = list(csv.DictReader((hub.course / "reports" / "grades.csv").open(encoding="utf-8")))
            got = {s: {r["exercise"]: float(r["score"]) for r in rows if r["student"] == s} for s in STUDENTS}
            assert got == EXPECTED
            totals = {s: sum(v.values()) for s, v in got.items()}

            # The class list, so that the Formgrader shows names (docs/guides/grading.md, "Names"):
            # a CSV as an LMS exports it, into the gradebook.
            roster = hub.course / "roster.csv"
            roster.write_text(
                "Username,First name,Last name,Email address\n"
                + "".join(f"{s},{first},{last},{s}@example.org\n" for s, (first, last) in NAMES.items())
            )
            os.chmod(roster, 0o644)
            imported = instructor(hub, "course", "roster", "import", str(roster))
            assert "3 students in" in imported and ": 0 added," in imported  # autograde added them

            # The Formgrader tab shows the submissions, with the students' names, and the scores
            # of reports/grades.csv.
            assert formgrader_scores(hub, browser, len(STUDENTS)) == {
                s: (f"{NAMES[s][1]}, {NAMES[s][0]}", f"{totals[s]:g} / {MAX_SCORE}") for s in STUDENTS
            }

            # Instructor: feedback, released through the exchange.
            instructor(hub, "course", "feedback", ASSIGNMENT)
            instructor(hub, "nbgrader", "release_feedback", ASSIGNMENT)

            # Students: fetch the feedback and read it; no hidden test in it.
            for student, page in pages.items():
                text = feedback_seen(hub, page, student)
                assert f"{ASSIGNMENT} (Score: {float(totals[student])} / {float(MAX_SCORE)})" in text
                assert SEEN[student] in text
                assert not [h for h in HIDDEN if h in text], student
            # Instructor: the grades, from the gradebook: mallory's late work scores 0.
            export = hub.course / "grades-export.csv"
            instructor(hub, "course", "export", "--to", str(export))
            exported = {r["student_id"]: r for r in csv.DictReader(export.open(encoding="utf-8"))}
            assert {s: float(r["raw_score"]) for s, r in exported.items()} == totals
            assert {s: float(r["late_submission_penalty"]) for s, r in exported.items()} == {
                s: totals[s] if s in LATE else 0.0 for s in STUDENTS
            }
            assert {s: float(r["score"]) for s, r in exported.items()} == {
                s: 0.0 if s in LATE else totals[s] for s in STUDENTS
            }
        except Exception:
            for n, context in enumerate(browser.contexts):  # what each user saw when it failed
                for m, page in enumerate(context.pages):
                    page.screenshot(path=str(hub.shots / f"failure-{n}-{m}.png"))
            raise
        finally:
            browser.close()

    # A 2 GB server is enough: each student's server and kernel together stayed far below it.
    print(
        "peak memory of each student's server and kernel:",
        ", ".join(f"{s} {peak / 2**20:.0f} MiB" for s, peak in hub.peaks.items()),
    )
    for student, peak in hub.peaks.items():
        assert 0 < peak < 2 * 2**30, f"{student}'s server peaked at {peak / 2**20:.0f} MiB"
