"""A second device for the hidden checks, without a GPU: the learner's torch code runs again with
its inputs (and the module's parameters and buffers) on another device, and a tensor it makes
on the CPU by itself (``torch.Tensor([d_head])``, ``torch.ones(s, s)``, ``torch.arange(n)``
without ``device=``) fails there as it would on the first GPU, naming the learner's line.

The contract says every torch exercise works on any device it is given; a check that runs on the
CPU alone cannot see the difference. Here the other device is a stand-in: every tensor on it is
a CPU tensor inside a wrapper (:class:`OnSecondDevice`) that reports ``SECOND`` (the ``meta``
device) as its device, so the values are real and can be compared, ``.item()`` and
data-dependent loops work, and no GPU is needed. While the learner's code runs, a dispatch mode
(:class:`SecondDeviceMode`) sees every torch operator: an operator that mixes tensors on the
second device with CPU tensors fails, as CUDA does (with CUDA's allowances: a 0-dim CPU tensor
is a scalar, and indices may be on the CPU); a factory asked for ``device=x.device`` makes its
tensor on the second device; everything else runs on the CPU data and stays on the device of
its inputs. Where a real accelerator is present, the checks run there as well.

The API, for a hidden check with a ``Check`` ``c``::

    for dev in second_devices():          # the stand-in, and the accelerator when there is one
        m = dev.module(c.build(Cls, ...))  # parameters and buffers moved (in place)
        out = dev.call(c, m, dev.tensor(x), mask=dev.tensor(mask))
        # out: what the learner returned, back on the CPU; the call failed unless every tensor
        # it returned was on ``dev`` and every operator it ran kept to one device
        c.close(out, want, f"wrong values on {dev}.", passed=f"runs on {dev}")

``dev.device`` is what a factory argument takes (``causal_mask(n, device=dev.device)``), and
``str(dev)`` names it in messages. Nothing here is the learner's: the check builds the inputs,
moves them, and calls the learner's code through ``Check.call`` (forbidden built-ins, quiet
calls, the learner's line in messages), with the mode entered just before its recording starts
(``Check.modes``) and left just after, so that the seal sees no mode left entered.
"""

from __future__ import annotations

import functools
import os
import sys
import traceback

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from course_utils.checks.kit import Check, CheckFailed

# What the check decides with, taken when this module is imported (before any learner code, under
# grading: the kernel imports every check first).
SECOND = torch.device("meta")
_CPU = torch.device("cpu")
_Tensor = torch.Tensor
_Parameter = torch.nn.Parameter
_make_wrapper = torch.Tensor._make_wrapper_subclass
_no_torch_function = torch._C._disabled_torch_function_impl
_only_lift_cpu = torch._C._only_lift_cpu_tensors
_set_only_lift_cpu = torch._C._set_only_lift_cpu_tensors
# made from data (torch.tensor(v, device=x.device)): for the meta device torch makes them empty,
# below any dispatch mode, so they are made on the CPU here and moved
_FROM_DATA = {"tensor": torch.tensor, "as_tensor": torch.as_tensor, "asarray": torch.asarray}
_new_tensor = torch.Tensor.new_tensor
_tolist = torch.Tensor.tolist
_getitem, _setitem = torch.Tensor.__getitem__, torch.Tensor.__setitem__
_ndarray = np.ndarray
_extract_stack = traceback.extract_stack
_getframe = sys._getframe
_isinstance, _type, _tuple, _list, _dict, _len, _any = isinstance, type, tuple, list, dict, len, any

# Operators whose CPU tensors CUDA accepts beside device tensors: indices of indexing (moved to the
# device by the operator), and copies, which move data between devices by design.
_CPU_INDICES_OK = frozenset(
    {"index", "index_put", "index_put_", "_index_put_impl_", "_unsafe_index", "_unsafe_index_put"}
)
_COPIES = frozenset(
    {
        "copy_",
        "copy",
        "_to_copy",
        "_copy_from",
        "_copy_from_and_resize",
        "lift_fresh",
        "lift_fresh_copy",
        "detach",
        "alias",
    }
)

# Not the learner's code: libraries, the course's own packages, and the building blocks a release
# provides beside its notebook (as in course_utils.checks._core).
_HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_LIBRARIES = (
    os.sep + "site-packages" + os.sep,
    os.sep + "lib" + os.sep + "python",
    os.path.join(_HERE, "course_utils") + os.sep,
    os.path.join(_HERE, "course_grading") + os.sep,
    "<frozen",
    os.sep + "building_blocks.py",
)


class OnSecondDevice(torch.Tensor):
    """A CPU tensor (``elem``) that reports ``SECOND`` as its device."""

    __torch_function__ = _no_torch_function

    @staticmethod
    def __new__(cls, elem, requires_grad: bool = False):
        self = _make_wrapper(
            cls,
            elem.size(),
            strides=elem.stride(),
            storage_offset=elem.storage_offset(),
            dtype=elem.dtype,
            layout=elem.layout,
            device=SECOND,
            requires_grad=requires_grad,
        )
        self.elem = elem
        return self

    def tolist(self):
        return _tolist(self.elem)

    def new_tensor(self, data, *args, **kwargs):
        if kwargs.get("device") is not None and not _is_device(kwargs["device"], SECOND):
            return _new_tensor(self.elem, data, *args, **kwargs)
        kwargs = dict(kwargs, device=_CPU)
        grad = bool(kwargs.pop("requires_grad", False))
        return OnSecondDevice(_new_tensor(self.elem, data, *args, **kwargs), requires_grad=grad)

    # An index given as a list or an array is turned into a tensor on the indexed tensor's
    # device, below any dispatch mode (for the meta device: empty): it is made here instead.
    def __getitem__(self, index):
        return _getitem(self, _index(index))

    def __setitem__(self, index, value):
        if _isinstance(value, (_list, _ndarray)):
            value = OnSecondDevice(_FROM_DATA["tensor"](value, dtype=self.dtype))
        return _setitem(self, _index(index), value)

    def numpy(self, *args, **kwargs):
        raise TypeError(
            f"can't convert {SECOND} device type tensor to numpy. Use Tensor.cpu() to "
            "copy the tensor to host memory first."
        )

    def __repr__(self) -> str:
        return f"tensor(..., device='{SECOND}', size={tuple(self.shape)}, dtype={self.dtype})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        # outside the mode (the check's own work on a result): run on the data, stay on the device
        return _run(func, args, kwargs or {}, None)


def _index(index):
    if _isinstance(index, _tuple):
        return _tuple(_index_part(i) for i in index)
    return _index_part(index)


def _index_part(i):
    if not _isinstance(i, (_list, _ndarray)):
        return i
    t = _FROM_DATA["tensor"](i)
    if t.dtype not in (torch.bool, torch.uint8):
        t = t.long()
    return OnSecondDevice(t)


def _wrap(t):
    return OnSecondDevice(t) if _type(t) is _Tensor or _isinstance(t, _Parameter) else t


def _tensors(value, found: list) -> None:
    if _isinstance(value, _Tensor):
        found.append(value)
    elif _isinstance(value, (_tuple, _list)):
        for v in value:
            _tensors(v, found)


def _map(fn, value):
    if _isinstance(value, _tuple):
        return _tuple(_map(fn, v) for v in value)
    if _isinstance(value, _list):
        return [_map(fn, v) for v in value]
    if _isinstance(value, _dict):
        return {k: _map(fn, v) for k, v in value.items()}
    return fn(value)


def _unwrap(value):
    return value.elem if _isinstance(value, OnSecondDevice) else value


def _is_device(device, target) -> bool:
    if device is None:
        return False
    return torch.device(device).type == target.type


def _run(func, args, kwargs, mode):
    name = func.__name__.split(".")[0]  # "add.Tensor" -> "add"
    found: list = []
    _tensors(args, found)
    _tensors(_tuple(kwargs.values()), found)
    wrapped = [t for t in found if _isinstance(t, OnSecondDevice)]
    device = kwargs.get("device")
    if wrapped and name not in _COPIES:
        indices = _indices(name, args) if name in _CPU_INDICES_OK else ()
        stray = [
            t
            for t in found
            if not _isinstance(t, OnSecondDevice) and t.dim() > 0 and not _any(t is i for i in indices)
        ]
        if stray:
            _mixed(mode, name, stray[0])
    for t in found:
        if t.device.type == SECOND.type and not _isinstance(t, OnSecondDevice):
            # a tensor made on the device behind the mode's back (no data): cannot be judged
            _escaped(mode, name)
    if _is_device(device, SECOND):
        kwargs = dict(kwargs, device=_CPU)
    out = func(*_map(_unwrap, args), **_map(_unwrap, kwargs))
    to_device = (bool(wrapped) and not _is_device(device, _CPU)) or _is_device(device, SECOND)
    if not to_device:
        return out
    inputs = {id(t.elem): t for t in wrapped}

    def back(value):
        if _isinstance(value, _Tensor):
            same = inputs.get(id(value))
            return same if same is not None else _wrap(value)
        return value

    return _map(back, out)


def _indices(name, args):
    """The index tensors of an indexing operator (the CPU may hold them)."""
    if _len(args) > 1 and _isinstance(args[1], (_tuple, _list)):
        return [t for t in args[1] if _isinstance(t, _Tensor)]
    return []


def _learner_line() -> str:
    """' in line `...`': the innermost line of the learner's own code on the stack."""
    for frame in reversed(_extract_stack(_getframe(1))):
        if not _any(lib in frame.filename for lib in _LIBRARIES):
            return f" in line `{frame.line.strip()}`" if frame.line else ""
    return ""


def _describe(t) -> str:
    return f"shape {tuple(t.shape)}, {str(t.dtype).removeprefix('torch.')}"


def _mixed(mode, name: str, stray) -> None:
    where = _learner_line()
    message = (
        f"on a second device (the check moves its inputs{', and the module,' if mode and mode.module else ''} "
        f"to another device, as a GPU would) your code mixes them with a tensor on the CPU "
        f"({_describe(stray)}), in torch's {name}{where}. On a GPU this raises "
        '"Expected all tensors to be on the same device". A tensor made inside your code '
        "(torch.tensor, torch.Tensor, torch.ones, torch.arange, ... without device=) lands on "
        "the CPU, and one kept as a plain attribute of a module stays there when the module "
        "is moved: make new tensors on the device of the inputs, and register a module's "
        "tensors as buffers."
    )
    _fail(mode, message)


def _escaped(mode, name: str) -> None:
    _fail(
        mode,
        f"on a second device your code made a tensor on the '{SECOND}' device in a way the "
        f"check cannot follow (in torch's {name}{_learner_line()}); make new tensors like the "
        "inputs (device=x.device, or torch.zeros_like(x), x.new_ones(...)).",
    )


def _fail(mode, message: str) -> None:
    if mode is None:
        raise RuntimeError(message)
    text = f"{mode.exercise}: {message}"
    if mode.failure is None:
        mode.failure = text  # kept: a learner's try/except cannot make it go away
    raise CheckFailed(text)


class FromData:
    """While the learner's code runs: ``torch.tensor(v, device=x.device)`` (and ``as_tensor``,
    ``asarray``) for the second device make the tensor on the CPU and move it there. For the
    meta device torch would make it empty, below any dispatch mode; so these three are replaced
    in ``torch`` while the learner's code runs (entered before the check's recording starts and
    left after it ends, so the seal, which looks before and after, finds torch as it was)."""

    def __enter__(self):
        for name, func in _FROM_DATA.items():
            setattr(torch, name, _from_data(func))
        return self

    def __exit__(self, *exc):
        for name, func in _FROM_DATA.items():
            setattr(torch, name, func)
        return False


def _from_data(func):
    def made(data, *args, **kwargs):
        device = kwargs.get("device")
        if not _is_device(device, SECOND) or _isinstance(data, _Tensor):
            return func(data, *args, **kwargs)
        kwargs = dict(kwargs, device=_CPU)
        grad = bool(kwargs.pop("requires_grad", False))
        return OnSecondDevice(func(data, *args, **kwargs), requires_grad=grad)

    made.__name__ = made.__qualname__ = func.__name__
    made.__doc__ = func.__doc__
    return made


class SecondDeviceMode(TorchDispatchMode):
    """While the learner's code runs: every operator through :func:`_run`."""

    def __init__(self, exercise: str, module: bool = False):
        super().__init__()
        self.exercise = exercise
        self.module = module
        self.failure: str | None = None
        self._lift = None

    def __enter__(self):
        self._lift = _only_lift_cpu()
        # torch.tensor(v, device=x.device) is made on the CPU, then moved: the move is seen here
        _set_only_lift_cpu(True)
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            _set_only_lift_cpu(self._lift)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return _run(func, args, kwargs or {}, self)


# --------------------------------------------------------------------------- the devices


class StandIn:
    """The second device without a GPU (see the module's docstring)."""

    device = SECOND

    def __str__(self) -> str:
        return "a second device"

    def tensor(self, value):
        """``value`` (a tensor, or a tuple/list/dict of them) on this device; a leaf that
        requires grad stays one."""

        def move(t):
            if not _isinstance(t, _Tensor) or _isinstance(t, OnSecondDevice):
                return t
            # a copy, as a move to another device makes: what the code does to it in place
            # stays there
            return OnSecondDevice(t.detach().clone(), requires_grad=t.requires_grad)

        return _map(move, value)

    def module(self, m):
        """``m`` with every parameter and buffer on this device (in place, as ``m.to`` does)."""
        moved: dict = {}  # a tensor shared by two modules (tied weights) stays shared
        for sub in m.modules():
            for space, make in ((sub._parameters, _device_parameter), (sub._buffers, _device_buffer)):
                for name, t in list(space.items()):
                    if t is not None and not _isinstance(t, OnSecondDevice):
                        if id(t) not in moved:
                            moved[id(t)] = (t, make(t))
                        space[name] = moved[id(t)][1]
        return m

    def call(self, c: Check, fn, *args, **kwargs):
        """``fn(*args, **kwargs)`` through ``c.call`` under the mode; what it returns, back on
        the CPU. Fails unless every tensor it returns is on this device."""
        mode = SecondDeviceMode(c.exercise, module=_isinstance(fn, torch.nn.Module))
        c.modes = (mode, FromData())
        try:
            result = c.call(functools.partial(_returned, fn, args, kwargs))  # fn is looked into
        except CheckFailed:
            if mode.failure is not None:
                raise CheckFailed(mode.failure) from None
            raise
        finally:
            c.modes = ()
        if mode.failure is not None:
            raise CheckFailed(mode.failure)
        got, off = result
        if off:
            c.fail(
                f"on a second device (the check moves its inputs to another device, as a GPU "
                f"would) your code returned a tensor on the CPU ({off}). The result belongs on "
                "the device of the inputs: make new tensors there (device=...), and don't move "
                "them (.cpu(), .to(...)) yourself."
            )
        return got


def _device_parameter(p):
    return _Parameter(OnSecondDevice(p.detach()), requires_grad=p.requires_grad)


def _device_buffer(b):
    return OnSecondDevice(b.detach())


def _returned(fn, args, kwargs):
    """Runs inside the learner's call: ``fn``'s result with its tensors back on the CPU (a check
    takes plain tensors), and the first returned tensor that was not on the device."""
    result = fn(*args, **kwargs)
    off: list = []

    def home(t):
        if _isinstance(t, OnSecondDevice):
            return t.elem
        if _isinstance(t, _Tensor):
            off.append(_describe(t))
        return t

    return _map(home, result), (off[0] if off else None)


class Accelerator:
    """The machine's own accelerator (CUDA, MPS), when it has one."""

    def __init__(self, device):
        self.device = device

    def __str__(self) -> str:
        return self.device.type

    def tensor(self, value):
        return _map(lambda t: t.to(self.device) if _isinstance(t, _Tensor) else t, value)

    def module(self, m):
        return m.to(self.device)

    def call(self, c: Check, fn, *args, **kwargs):
        result = c.call(fn, *args, **kwargs)
        off: list = []

        def home(t):
            if _isinstance(t, _Tensor):
                if t.device.type != self.device.type:
                    off.append(_describe(t))
                return t.cpu()
            return t

        got = _map(home, result)
        if off:
            c.fail(
                f"on {self} your code returned a tensor on another device ({off[0]}). The "
                "result belongs on the device of the inputs."
            )
        return got


def second_devices() -> list:
    """The devices a hidden check runs the learner's torch code on, besides the CPU: the
    stand-in always (grades must not depend on the grading machine), and the accelerator when
    there is one."""
    from course_utils.checks.kit import devices

    return [StandIn()] + [Accelerator(d) for d in devices()[1:]]
