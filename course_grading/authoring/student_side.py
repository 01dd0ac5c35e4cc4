"""``course build-student OUT``: everything a student's machine needs, and nothing that grades.

    OUT/wheels/attention_course_learner-<version>-py3-none-any.whl   the learner side: course_utils
    OUT/notebooks/NN_topic/…             the released assignments (notebook + building_blocks.py)
    OUT/constraints.txt                  the versions the course is tested with
    OUT/nbgrader_config.py               the students' nbgrader settings (course id, exchange)
    OUT/Dockerfile, OUT/README.md        a JupyterHub single-user image built from the above

The wheel is written directly (it is pure Python and data, no build tool needed) and holds the
package ``course_utils`` only: data, device choice, plots, widgets, the visible checks, the toy
model's weights. Nothing is written unless the learner side and every release pass a leak
check first: no module that imports the instructor side (``course_grading``), no line of any
solution or hidden test in the wheel, and no assignment's own (or a later assignment's)
solution in any released folder.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import shutil
import zipfile
from pathlib import Path

import tomllib

import course_utils
from course_grading.authoring import cells
from course_grading.authoring.nbformat_tools import read_notebook
from course_grading.authoring.release import release, secret_lines
from course_grading.course.course import Course
from course_grading.errors import GradingError
from course_grading.grading.red_flags import Flag

DISTRIBUTION = "attention-course-learner"
PACKAGE = "course_utils"
DATA_SUFFIXES = (".npz", ".md", ".pt", ".json", ".txt")
_EPOCH = (1980, 1, 1, 0, 0, 0)  # fixed timestamps: the same sources give the same wheel


class LearnerLeak(Flag):
    """Something of the instructor side that the student side would hold: where, and what."""


# --------------------------------------------------------------------------- what goes in


def learner_files(package_dir: Path | None = None) -> dict[str, bytes]:
    """{path inside the wheel: bytes} of the learner package (code and shipped data)."""
    package_dir = Path(package_dir or Path(course_utils.__file__).resolve().parent)
    found = {}
    for path in sorted(package_dir.rglob("*")):
        if not path.is_file() or path.is_symlink() or "__pycache__" in path.parts:
            continue
        if path.suffix == ".py" or (
            path.suffix in DATA_SUFFIXES and "data" in path.relative_to(package_dir).parts
        ):
            found[f"{PACKAGE}/{path.relative_to(package_dir).as_posix()}"] = path.read_bytes()
    return found


def course_secrets(course, assignments=None) -> dict[str, set[str]]:
    """{assignment: its secret lines} (solution and hidden-test regions of its source notebook)."""
    course = Course.of(course)
    names = assignments or course.source_assignments()
    markers = course.markers()
    return {a: secret_lines(read_notebook(course.folders.source_notebook(a)), markers) for a in names}


def _imports_grading(source: str) -> bool:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return True  # nothing unreadable ships
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "course_grading" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "course_grading":
            return True
    return False


def learner_leaks(files: dict[str, bytes], secrets: dict[str, set[str]]) -> list[LearnerLeak]:
    """What in the learner package would give away a solution or the grading side."""
    every_secret = set().union(*secrets.values()) if secrets else set()
    leaks = []
    for name, data in sorted(files.items()):
        if not name.endswith(".py"):
            continue
        text = data.decode("utf-8", errors="replace")
        if _imports_grading(text):
            leaks.append(LearnerLeak(name, "imports the instructor side (course_grading)"))
        for line in text.splitlines():
            if line.strip() in every_secret:
                leaks.append(LearnerLeak(name, f"solution or hidden-test line {line.strip()!r}"))
    return leaks


def release_leaks(course, secrets: dict[str, set[str]]) -> list[LearnerLeak]:
    """Lines of an assignment's own or a later assignment's solutions in its released folder.
    Earlier assignments' components reach it on purpose, in building_blocks.py: a line that
    an earlier solution has too (``self.dropout = nn.Dropout(dropout)``) gives nothing away."""
    where = Course.of(course).folders
    leaks = []
    for assignment in sorted(secrets):
        folder = where.release / assignment
        earlier = set().union(*(s for a, s in secrets.items() if a < assignment))
        forbidden = set().union(*(s for a, s in secrets.items() if a >= assignment)) - earlier
        for path in sorted(folder.rglob("*")) if folder.is_dir() else []:
            if path.is_symlink():
                leaks.append(LearnerLeak(where.shown(path), "a symbolic link"))
                continue
            if not path.is_file() or path.suffix not in (".py", ".ipynb", ".md", ".txt"):
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            if path.suffix == ".ipynb":
                text = "\n".join(cells.text(c.get("source")) for c in read_notebook(path).cells)
            for line in text.splitlines():
                if line.strip() in forbidden:
                    leaks.append(LearnerLeak(where.shown(path), f"solution line {line.strip()!r}"))
    return leaks


# --------------------------------------------------------------------------- the wheel


def _project(root: Path) -> dict:
    return tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def write_wheel(
    files: dict[str, bytes],
    folder: Path,
    version: str,
    requires: list[str],
    requires_python: str,
    summary: str,
) -> Path:
    """A pure-Python wheel of ``files`` (deterministic bytes) in ``folder``."""
    dist = DISTRIBUTION.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    metadata = [
        "Metadata-Version: 2.1",
        f"Name: {DISTRIBUTION}",
        f"Version: {version}",
        f"Summary: {summary}",
        f"Requires-Python: {requires_python}",
    ]
    metadata += [f"Requires-Dist: {r}" for r in requires]
    contents = dict(files)
    contents[f"{info}/METADATA"] = ("\n".join(metadata) + "\n").encode()
    contents[f"{info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: course build-student\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    contents[f"{info}/top_level.txt"] = f"{PACKAGE}\n".encode()
    record = [f"{name},{_record_hash(data)},{len(data)}" for name, data in contents.items()]
    record.append(f"{info}/RECORD,,")
    contents[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as wheel:
        for name, data in contents.items():
            entry = zipfile.ZipInfo(name, date_time=_EPOCH)
            entry.external_attr = 0o644 << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(entry, data)
    return path


# --------------------------------------------------------------------------- the image

DOCKERFILE = """\
# A JupyterHub single-user image for the students of {course_id}, built by `course build-student`.
# It holds the learner side of the course (the wheel in wheels/), nbgrader's student extensions
# (the Assignments tab) and the students' nbgrader settings; no solution, no hidden test, no grader.
#
#   docker build -t {course_id}-student .
#
# Mount the exchange (a volume every server shares, read-write) at {exchange}. Run each
# student's server as a Unix user of their own, named as on the hub (start the image as root
# with NB_USER=<hub name> and NB_UID=<that student's own UID>): the instructor's collect takes
# who submitted from the owner of the submission.
FROM quay.io/jupyter/base-notebook:python-3.11

USER root
COPY nbgrader_config.py /etc/jupyter/nbgrader_config.py
COPY notebooks/ /opt/{course_id}/notebooks/
USER ${{NB_UID}}

COPY --chown=${{NB_UID}}:${{NB_GID}} wheels/ /tmp/wheels/
COPY constraints.txt /tmp/constraints.txt
# the CPU build of torch (the CUDA one is several GB; use it only on GPU nodes)
RUN pip install --no-cache-dir --extra-index-url https://download.pytorch.org/whl/cpu \\
        -c /tmp/constraints.txt /tmp/wheels/*.whl \\
 && rm -rf /tmp/wheels /tmp/constraints.txt \\
 && jupyter labextension disable --level=sys @jupyter/nbgrader:formgrader \\
 && jupyter labextension disable --level=sys @jupyter/nbgrader:create-assignment \\
 && jupyter labextension disable --level=sys @jupyter/nbgrader:course-list \\
 && jupyter server extension disable --sys-prefix nbgrader.server_extensions.formgrader \\
 && jupyter server extension disable --sys-prefix nbgrader.server_extensions.course_list
"""

STUDENT_CONFIG = """\
# nbgrader settings for students of {course_id} (/etc/jupyter/nbgrader_config.py on their servers).
c = get_config()  # noqa: F821 - traitlets defines get_config in a configuration file
c.CourseDirectory.course_id = {course_id!r}
c.Exchange.root = {exchange!r}
# Who submitted is the Unix user the server runs as, never a name the student can set: the
# instructor's `nbgrader collect` files each submission under the name of its owner and refuses
# one that claims another student. So each student's server runs as a Unix user of their own,
# named as on the hub (JupyterHub's LocalProcessSpawner does that; on Kubernetes, a UID per
# student and NB_USER set to the hub name), and nbgrader takes the student id from it.
"""

README = """\
# {course_id}: the student side

Built by `course build-student` from the course repository. Everything here may be given to
students: it holds no solution, no hidden test and nothing of the grader.

| path | what |
| --- | --- |
| `wheels/{wheel}` | the course's learner package (`course_utils`): data, plots, widgets, visible checks |
| `notebooks/` | the released assignments, as nbgrader's `release_assignment` would give them |
| `constraints.txt` | the versions the course is tested with |
| `nbgrader_config.py` | the students' nbgrader settings: course id `{course_id}`, exchange `{exchange}` |
| `Dockerfile` | a JupyterHub single-user image built from the above |

Without Docker, in a Python {requires_python} environment:

    pip install -c constraints.txt wheels/{wheel}
    cp nbgrader_config.py /etc/jupyter/        # or ~/.jupyter/ for one user

On a hub, students get the assignments through nbgrader's exchange (the *Assignments* tab); the
copy in `notebooks/` (also in the image, under `/opt/{course_id}/notebooks`) is for self-paced use.
"""


def build(course, out, force: bool = False) -> dict[str, Path]:
    """Write the student side of the ``course`` (a ``Course``, or its root) into the folder
    ``out`` (which must be empty or absent, unless ``force``); returns the main paths written.
    Raises GradingError, writing nothing, when notebooks/ is out of date or anything would leak."""
    course, out = Course.of(course), Path(out).resolve()
    root = course.root
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not force)):
        raise GradingError(f"{out} is not an empty folder (use --force to replace what is in it)")
    stale = release(course, check_only=True)
    if stale:
        raise GradingError(f"notebooks/ is out of date ({stale[0]}…): run `course release` first")
    secrets = course_secrets(course)
    files = learner_files()
    leaks = learner_leaks(files, secrets) + release_leaks(course, secrets)
    if leaks:
        more = f" (and {len(leaks) - 1} more)" if len(leaks) > 1 else ""
        raise GradingError(f"refusing to build the student side, it would leak: {leaks[0]}{more}")
    config = course.config
    course_id = config.CourseDirectory.get("course_id") or "attention-course"
    exchange = config.get("Exchange", {}).get("root") or "/srv/nbgrader/exchange"
    project = _project(root)
    if out.exists() and force:
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    wheel = write_wheel(
        files,
        out / "wheels",
        project["version"],
        list(project["dependencies"]),
        project.get("requires-python", ">=3.10"),
        project.get("description", ""),
    )
    for assignment in course.source_assignments():
        source = course.folders.release / assignment
        for path in sorted(source.rglob("*")) if source.is_dir() else []:
            if path.is_file() and not path.is_symlink() and ".ipynb_checkpoints" not in path.parts:
                target = out / "notebooks" / assignment / path.relative_to(source)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)
    shutil.copyfile(root / "scripts" / "constraints.txt", out / "constraints.txt")
    values = dict(
        course_id=course_id,
        exchange=exchange,
        wheel=wheel.name,
        requires_python=project.get("requires-python", ">=3.10"),
    )
    (out / "nbgrader_config.py").write_text(STUDENT_CONFIG.format(**values), encoding="utf-8")
    (out / "Dockerfile").write_text(DOCKERFILE.format(**values), encoding="utf-8")
    (out / "README.md").write_text(README.format(**values), encoding="utf-8")
    return {"wheel": wheel, "notebooks": out / "notebooks", "dockerfile": out / "Dockerfile"}
