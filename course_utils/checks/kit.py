"""The check kit: what every check builds on, the visible ones here and the hidden ones of the
instructor's side (``course_grading.checks``), as public names.

    Check, CheckFailed          one check's cases, calls and verdicts; its failure
    generator, devices, stored  seeded random inputs, the devices to try, stored expected outputs
    to_numpy                    a learner's result as a NumPy array
    exercise_check              a check written as check_<exercise>(c, fn), its Check opened
                                and closed around it
    torch_equal, torch_isfinite, np_array_equal
                                comparisons as the checks record them (a learner's replacement
                                of the library function is seen, ``_seal``)
    prepare_recording           set up the recording of what learner code calls (the warm
                                sandbox does it before it forks a kernel)
    load_libraries, protect, kernel_started, own_threads_now
                                the seal: record the libraries and check modules, and the
                                kernel's own threads, before the first cell runs (outside
                                grading: the threads alive when the setup cell runs)

The implementation stays in ``_core``, ``_exercise``, ``_recording`` and ``_seal``; this module only names
what other packages may use.
"""

from ._core import (
    Check,
    CheckFailed,
    devices,
    generator,
    np_array_equal,
    stored,
    to_numpy,
    torch_equal,
    torch_isfinite,
)
from ._exercise import exercise_check
from ._recording import prepare_recording
from ._seal import kernel_started, load_libraries, own_threads_now, protect

__all__ = [
    "Check",
    "CheckFailed",
    "devices",
    "exercise_check",
    "generator",
    "kernel_started",
    "load_libraries",
    "np_array_equal",
    "own_threads_now",
    "prepare_recording",
    "protect",
    "stored",
    "to_numpy",
    "torch_equal",
    "torch_isfinite",
]
