"""What a sandbox is started with, read from the course's ``nbgrader_config.py``.

    c.Sandbox.warm = True          # fork kernels and audits from one pre-loaded sandbox
    c.Sandbox.memory_mb = 3072     # memory of the whole sandbox (cgroup; else address space)
    c.Sandbox.cpu_seconds = 600    # CPU time of each process
    c.Sandbox.processes = 128      # tasks (threads count) in the sandbox
    c.Sandbox.file_mb = 64         # largest file a process may write
    c.Sandbox.open_files = 1024
    c.Sandbox.tmpfs_mb = 256       # each private writable folder: /tmp, /var/tmp, /dev/shm,
                                   # $HOME and the working folder
    c.Sandbox.hidden_folders = ["/srv/other-course"]   # hidden from every sandboxed process,
                                   # besides the course folders (below)
    c.Sandbox.grader_memory_mb = 1024  # each grading worker's own memory (not its kernels')

The course folders every sandboxed process finds empty: the course root (gradebook,
``submitted/``, ``autograded/``, ``feedback/``, ``solutions/``), every other folder the
configuration names (``CourseDirectory.root``, absolute step directories, the folder of a
SQLite gradebook, nbgrader's exchange ``Exchange.root`` and its cache), and the nbgrader
configuration files of Jupyter's configuration folders (they may hold database credentials).
``configure`` puts the computed list in ``c.SandboxKernelManager.hidden_folders``, where the
grading kernels read it; ``course_settings`` gives the same ``Settings`` to whoever starts the
warm sandbox first.

Importing this module loads traitlets only (the ``course`` command starts the warm sandbox
before it imports nbgrader).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path

from traitlets import Bool, Integer, List, Unicode
from traitlets.config import Config, Configurable

from course_grading.course import config as course_config

# nbgrader's default exchange (0.9) and the one its documentation uses
DEFAULT_EXCHANGES = ("/usr/local/share/nbgrader/exchange", "/srv/nbgrader/exchange")
STEP_DIRECTORIES = (
    "source_directory",
    "release_directory",
    "submitted_directory",
    "autograded_directory",
    "feedback_directory",
    "solution_directory",
)


class Sandbox(Configurable):
    """The bubblewrap sandbox of every grading kernel and integrity audit."""

    warm = Bool(
        True,
        help="Fork grading kernels and audits from one warm, pre-loaded sandbox "
        "per grading process (else every kernel starts a sandbox of its own, "
        "about 2 s more each).",
    ).tag(config=True)
    memory_mb = Integer(
        3072,
        help="Memory of a whole sandbox, MB (a cgroup where the machine "
        "allows, else each process's address space).",
    ).tag(config=True)
    cpu_seconds = Integer(600, help="CPU seconds of each sandboxed process.").tag(config=True)
    processes = Integer(128, help="Tasks (threads count) in a sandbox.").tag(config=True)
    file_mb = Integer(64, help="Largest file a sandboxed process may write, MB.").tag(config=True)
    open_files = Integer(1024, help="Open files of each sandboxed process.").tag(config=True)
    tmpfs_mb = Integer(
        256,
        help="Size of each private writable folder of a sandboxed process "
        "(/tmp, /var/tmp, /dev/shm, $HOME, its working folder), MB; "
        "nothing else it sees is writable.",
    ).tag(config=True)
    hidden_folders = List(
        Unicode(),
        help="More folders every sandboxed process finds empty, "
        "besides the course folders the configuration "
        "names.",
    ).tag(config=True)
    grader_memory_mb = Integer(
        1024,
        min=0,
        help="Memory of each grading worker process itself "
        "(nbgrader reading and writing the notebook, the "
        "scanner, the audit's comparisons; its kernels "
        "have memory_mb), MB: a memory cgroup of its own "
        "where the machine allows, else a watch of its "
        "resident memory. A worker over it is killed and "
        "the submission it graded is an error row, "
        "flagged. Unsandboxed kernels (--no-sandbox) "
        "count in it too. 0: no bound.",
    ).tag(config=True)


@dataclass(frozen=True)
class Settings:
    """One sandbox's settings, as plain values (compared, and sent to worker processes)."""

    hidden: tuple[str, ...] = ()
    # the defaults are Sandbox's
    memory_mb: int = Sandbox.memory_mb.default_value
    cpu_seconds: int = Sandbox.cpu_seconds.default_value
    processes: int = Sandbox.processes.default_value
    file_mb: int = Sandbox.file_mb.default_value
    open_files: int = Sandbox.open_files.default_value
    tmpfs_mb: int = Sandbox.tmpfs_mb.default_value
    warm: bool = Sandbox.warm.default_value
    grader_memory_mb: int = Sandbox.grader_memory_mb.default_value

    @classmethod
    def from_config(cls, config: Config | None, hidden=None) -> "Settings":
        """``config``'s ``Sandbox`` values; the hidden folders are ``hidden`` if given, else
        ``SandboxKernelManager.hidden_folders`` (set by ``configure``) with ``Sandbox``'s own."""
        sandbox = Sandbox(config=config or Config())
        if hidden is None:
            manager = (config or Config()).get("SandboxKernelManager", {})
            hidden = [*manager.get("hidden_folders", []), *sandbox.hidden_folders]
        values = {f.name: getattr(sandbox, f.name) for f in fields(cls) if f.name != "hidden"}
        return cls(hidden=_normalized(hidden), **values)


def _normalized(folders) -> tuple[str, ...]:
    found = []
    for folder in folders:
        if folder:
            path = os.path.realpath(os.path.expanduser(str(folder)))
            if path != "/":
                found.append(path)
    return tuple(sorted(dict.fromkeys(found)))


def course_folders(config: Config, *roots) -> tuple[str, ...]:
    """The folders of the course that no sandboxed process may see: ``roots``, and every
    folder the configuration (``config`` and nbgrader's configuration files in Jupyter's
    configuration folders) names. Files are named as themselves (bubblewrap covers them)."""
    found = [str(r) for r in roots]
    for conf in (config, *_jupyter_configs()):
        found += _named_folders(conf)
    found += [e for e in DEFAULT_EXCHANGES]
    found += [str(p) for p in config_files()]
    return _normalized(f for f in found if os.path.lexists(os.path.expanduser(f)))


def config_files() -> list[Path]:
    """nbgrader configuration files in Jupyter's configuration folders."""
    return course_config.jupyter_config_files(absolute_only=False)


def _jupyter_configs() -> list[Config]:
    loaded = []
    for path in config_files():
        try:
            loaded.append(course_config.load(path))
        except Exception:  # noqa: BLE001 - a broken file: nbgrader itself will say so
            continue
    return loaded


def _named_folders(config: Config) -> list[str]:
    found = []
    course = config.get("CourseDirectory", {})
    root = course.get("root")
    if isinstance(root, str) and root:
        found.append(root)
    for step in STEP_DIRECTORIES:
        value = course.get(step)
        if isinstance(value, str) and os.path.isabs(value):
            found.append(value)
    db_url = course.get("db_url")
    if isinstance(db_url, str) and db_url.startswith("sqlite:///"):
        found.append(os.path.dirname(db_url[len("sqlite:///") :]) or "/")
    for section in ("Exchange", "ExchangeFactory"):
        for key in ("root", "cache"):
            value = config.get(section, {}).get(key)
            if isinstance(value, str) and value:
                found.append(value)
    return found


def course_settings(config: Config, config_root, *roots) -> Settings:
    """The settings every sandbox of the course at ``config_root`` (whose configuration is
    ``config``) is started with, hiding ``roots`` too: what ``configure`` gives the grading
    kernels, for whoever starts first (``course.Course.sandbox_settings``)."""
    return Settings.from_config(
        config, hidden=(*course_folders(config, config_root, *roots), *Sandbox(config=config).hidden_folders)
    )
