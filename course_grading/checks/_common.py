"""What every hidden check shares, and what the grading kernel does before the notebook's first
cell.

A grading kernel loads this module as an IPython extension (``checks.KERNEL_ARGUMENT``, which
``LimitedExecute`` gives every kernel it starts: sandboxed, warm or not, or plain). Loading it
imports every check, visible and hidden, and the reference they compare with, records what
they rely on (``course_utils.checks._seal``: the library functions and classes, the checks'
own modules) and the kernel's own threads, and installs the recording on the kernel's
event-loop threads: all before any cell of the submission runs, so that a cell placed before
the setup cell finds it done already.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
import pkgutil


def visible_first(check, fn) -> None:
    """Run the visible check ``check`` on ``fn`` again, quietly, so that the hidden half grades
    on its own: the visible call in a test cell goes through the notebook's namespace, where a
    submission can replace it; this one comes from the package. Its failure is the grade cell's
    failure, with the visible check's own message."""
    with contextlib.redirect_stdout(io.StringIO()):
        check(fn)


def hidden_check(visible, forbidden, ops=()):
    """A hidden check of exercise ``name`` written as ``check_<name>(c, fn)``
    (``exercise_check``): ``visible``'s check of the same name runs first (``visible_first``),
    then the body with its hidden ``Check``, forbidding ``forbidden`` and ``ops``."""
    from course_utils.checks.kit import exercise_check

    def wrap(body):
        visible_check = getattr(visible, body.__name__)
        first = functools.partial(visible_first, visible_check)
        return exercise_check(forbidden, ops, hidden=True, first=first)(body)

    return wrap


def forbidding(reference: str, *names: str) -> list[str]:
    """The dotted names of ``names`` in the module ``reference`` and of their ``forward``: what a
    hidden check forbids a submission to call (the reference it is compared with)."""
    return [f"{reference}.{name}" for name in names] + [f"{reference}.{name}.forward" for name in names]


def check_modules() -> list:
    """Every module of the checks, visible and hidden (importing them, and the reference)."""
    import course_grading.checks as hidden
    import course_utils.checks as visible

    modules = []
    for package in (visible, hidden):
        for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
            modules.append(importlib.import_module(info.name))
    return modules


def seal_kernel(app=None) -> None:
    """Before the first cell: record what the checks rely on and the kernel's own threads."""
    from course_utils.checks import kit

    kit.load_libraries()
    modules = check_modules()
    kit.protect(*modules)
    kit.kernel_started(app)


def load_ipython_extension(ipython) -> None:
    """IPython's entry point: the kernel loads this module before it runs any cell."""
    app = None
    try:
        from ipykernel.kernelapp import IPKernelApp

        if IPKernelApp.initialized():
            app = IPKernelApp.instance()
    except ImportError:  # pragma: no cover - a kernel has ipykernel
        pass
    seal_kernel(app)


def gradients_reach(c, module, *args, **kwargs) -> None:
    """Backward through the learner's ``module`` (from a fixed random mix of its output, so that
    a final LayerNorm does not cancel it): every parameter must get a non-zero gradient. Values
    can be right while training is broken: a forward under ``torch.no_grad()``, a ``.detach()``,
    a tensor rebuilt from numbers."""
    import torch

    from course_utils.checks.kit import generator

    with torch.enable_grad():
        out = c.call(module, *args, **kwargs)
        out = out[0] if isinstance(out, tuple) else out
        c.that(
            isinstance(out, torch.Tensor) and out.requires_grad,
            "no gradient flows back "
            "through the output: training would change nothing. Is forward (or a part of it) "
            "under torch.no_grad(), or is a tensor detached or rebuilt from numbers on the way?",
        )
        mix = torch.randn(out.shape, generator=generator(7), dtype=out.dtype)
        (out * mix).sum().backward()
    for name, p in module.named_parameters():
        c.that(
            p.grad is not None and bool(p.grad.abs().sum() > 0),
            f"no gradient reaches "
            f"{name}: is it used in forward, with tensor operations only (no torch.no_grad(), "
            ".detach() or tensors rebuilt from numbers on the way)?",
        )
    c.ok("gradients reach every parameter")


def trains_on_every_device(c, build, args: tuple, want) -> None:
    """A module ``build()`` returns (the learner's, afresh, its known weights loaded) passes
    gradients to every parameter (``gradients_reach``) and, on every second device, gives
    ``want`` for ``args``."""
    from ._device import second_devices

    gradients_reach(c, build(), *args)
    for dev in second_devices():
        runs_on(c, dev, dev.module(build()), args, want)


def runs_on(c, dev, fn, args: tuple, want, wrong="wrong values on {dev}.", rtol=1e-3, passed="runs on {dev}"):
    """``fn(*args)`` on the second device ``dev`` gives ``want``, to float32's tolerance;
    ``wrong`` and ``passed`` name the device as ``{dev}``."""
    from course_utils.checks.torch_parts import compare

    got = dev.call(c, fn, *dev.tensor(args))
    compare(
        c, got, want, wrong.format(dev=dev), atol=1e-4, rtol=rtol, passed=passed and passed.format(dev=dev)
    )


def both_norms(c, build, load_parts, case, plain, double) -> None:
    """Post-norm, then pre-norm: the learner's layer ``build(norm_first)``, its known weights
    loaded (``load_parts``), compared by ``case(layer, *inputs, norm_first, wrong, passed=...)``
    on ``plain`` = (inputs, wrong, passed); then a float64 copy on ``double()``'s, which must
    give float64. The texts may name ``{kind}`` ("post" or "pre") and ``{norm_first}``."""
    import torch

    from course_utils.checks.torch_parts import F64

    for norm_first in (False, True):
        names = {"kind": "pre" if norm_first else "post", "norm_first": norm_first}
        for (inputs, wrong, passed), tol in ((plain, {}), (double(), F64)):
            layer = build(norm_first)
            layer = layer.double() if tol else layer
            load_parts(layer)
            got = case(
                layer, *inputs, norm_first, wrong.format(**names), passed=passed.format(**names), **tol
            )
        c.that(got.dtype == torch.float64, "float64 in should give float64 out.")


def leaves_input(c, fn, x, *args, wrong: str, passed: str | None = None) -> None:
    """``fn(x, *args)`` must leave the tensor ``x`` as it was (``wrong`` says what it did)."""
    from course_utils.checks.kit import torch_equal

    before = x.clone()
    c.call(fn, x, *args)
    c.that(torch_equal(x, before), wrong, passed)
