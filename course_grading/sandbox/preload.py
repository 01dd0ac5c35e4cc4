"""What the sandbox's server imports before it forks, and what its children may import.

A warm server imports everything a kernel or an audit would (``preload``: ``PRELOAD``, every
module of ``PACKAGES``, the audit's entry point as the grader named it), while ``Refuse``
keeps the instructor's secret modules out: whatever reached for one is forgotten, to be
imported afresh, whole, by a kernel that may. A kernel's child then lifts the refusal
(``trusted_imports``); both fix the course's packages to their installed folders
(``fix_paths``). ``named`` turns a name of the grader's spec into its module or function.
"""

import importlib
import os
import re
import sys

PRELOAD = (
    "numpy",
    "torch",
    "torch.nn",
    "torch.nn.functional",
    "matplotlib",
    "matplotlib.pyplot",
    "matplotlib_inline.backend_inline",
    "ipywidgets",
    "IPython",
    "ipykernel.kernelapp",
    "ipykernel.ipkernel",
    "ipykernel.zmqshell",
    "ipykernel.debugger",
    "course_utils",
    "course_utils.toy_task",
    "course_utils.training",
    "course_utils.minilm",
)
PACKAGES = ("course_utils.checks", "course_utils.plots", "course_utils.widgets")
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*(:[A-Za-z_][A-Za-z0-9_]*)?")
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters
MMAP_BELOW_MB, TRIM_ABOVE_MB = 32, 64


class Refuse:
    """A meta path finder that refuses the instructor's secret modules (``names``)."""

    def __init__(self, names):
        self.names = tuple(names)
        self.refused: list[str] = []

    def find_spec(self, name, path=None, target=None):
        if any(name == n or name.startswith(n + ".") for n in self.names):
            self.refused.append(name)
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def _step(refuse: Refuse, action) -> None:
    """Run one preload ``action``; if it reached for a refused module, forget every module it
    imported (it is then imported afresh, whole, by a kernel that needs it)."""
    before, refused = set(sys.modules), len(refuse.refused)
    try:
        action()
    except Exception:  # noqa: BLE001 - a missing optional module only costs its child time
        pass
    if len(refuse.refused) == refused:
        return
    for name in set(sys.modules) - before:
        module = sys.modules.pop(name, None)
        parent, _, attr = name.rpartition(".")
        if parent in sys.modules and getattr(sys.modules[parent], attr, None) is module:
            delattr(sys.modules[parent], attr)


def named(name: str):
    """The module ``module``, or the function ``module:function``, that ``name`` names."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ValueError(f"not a module or function name: {name!r}")
    module, _, attr = name.partition(":")
    found = importlib.import_module(module)
    return getattr(found, attr) if attr else found


def preload(refuse: Refuse, audit: dict | None = None) -> None:
    """Import what every kernel and audit would import (``audit``: the audit's entry point, as
    handed in the spec), and load the GloVe vectors once."""
    import pkgutil

    audit = audit or {}
    for name in (*PRELOAD, *audit.get("preload", ())):
        _step(refuse, lambda name=name: importlib.import_module(name))
    for package in PACKAGES:
        paths = []
        _step(refuse, lambda package=package: paths.extend(importlib.import_module(package).__path__))
        for info in pkgutil.iter_modules(paths, package + "."):
            _step(refuse, lambda name=info.name: importlib.import_module(name))

    def glove():
        import course_utils

        course_utils.load_glove()

    _step(refuse, glove)

    def recording():  # what torch imports the first time a check records operators
        from course_utils.checks.kit import prepare_recording

        prepare_recording()

    _step(refuse, recording)
    for name in audit.get("warm_up", ()):  # what an audit looks up first (the operators it records)
        _step(refuse, lambda name=name: named(name)())
    _step(refuse, _format_a_traceback)


def keep_freed_memory() -> None:
    """The C allocator's settings every forked child inherits: blocks up to MMAP_BELOW_MB come
    from the heap, and the heap keeps up to TRIM_ABOVE_MB of freed memory. Otherwise a large
    block (a few-megabyte array: 20,000 GloVe rows at a time) is a new mapping whose pages
    fault in one by one, and freed memory goes back to the system to fault in again. Measured
    on 40 kernels of 03: 1.6 million page faults instead of 2.9 million, 4.5 CPU-seconds of
    system time instead of 6.7; their peak resident memory the same (about 400 MB)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_BELOW_MB << 20)
        libc.mallopt(M_TRIM_THRESHOLD, TRIM_ABOVE_MB << 20)
    except (OSError, AttributeError):  # not glibc: its defaults stay
        pass


def _format_a_traceback() -> None:
    """What IPython imports the first time a cell raises (stack_data, executing, pygments'
    formatters: about 30 ms of a kernel's CPU), imported once here."""
    from IPython.core import ultratb

    try:
        raise NotImplementedError("a traceback formatted at the warm sandbox's start")
    except NotImplementedError:
        ultratb.VerboseTB().structured_traceback(*sys.exc_info())


def package_folders(module) -> list[str]:
    """The folders a package is imported from (a namespace package may have several)."""
    if getattr(module, "__file__", None):
        return [os.path.dirname(os.path.realpath(module.__file__))]
    return sorted({os.path.realpath(p) for p in getattr(module, "__path__", []) if os.path.isdir(p)})


def trusted_imports(refuse: Refuse) -> None:
    """A kernel may import the hidden checks (and the reference they use): the refusal goes.
    The course's packages are imported now, before the kernel's own folder is on sys.path, and
    their search paths fixed (a namespace package would take a folder of the same name from
    any later entry of sys.path)."""
    sys.meta_path[:] = [f for f in sys.meta_path if f is not refuse]
    fix_paths()
    sys.path[:] = [p for p in sys.path if p and os.path.isabs(p)]


def fix_paths() -> None:
    import course_grading
    import course_utils

    for package in (course_grading, course_utils):
        package.__path__ = package_folders(package)
