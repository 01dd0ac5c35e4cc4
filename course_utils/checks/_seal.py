"""What the checks rely on, taken before the learner's code can change it, and the proof, at
every check, that it is still in place.

A check decides with library functions (``torch.equal``, ``np.allclose``, a tensor's ``==``,
``.all()``, ``.item()``) that the learner's code could reach and replace: ``import torch as t;
t.equal = lambda *a: True``, ``vars(torch)['equal'] = ...``, ``np.testing.assert_allclose =
...``, a function's ``__code__`` swapped, ``torch.Tensor.__eq__`` patched, a torch function mode
left entered. :func:`take` records, once per process and as early as possible, every function,
class and module of the namespaces the checks use (and of the checks themselves); :func:`changed`
names the first of them that is no longer what was recorded. Under grading the kernel takes
the record before the notebook's first cell (``course_grading.checks._common`` is loaded as a
kernel extension, and the warm sandbox has imported all of this before it forks the kernel);
elsewhere it is taken when the checks are first imported (the setup cell), and a library's
namespaces once it is imported (a NumPy-only notebook does not pay for importing torch).

The same goes for threads. What a check records while the learner's code runs (the names and
the torch operators it calls) is seen on the thread that runs the check; work handed to another
thread that already exists (a thread pool, a ``threading.Timer``, a thread started by an
imported module) would not be. :func:`foreign_threads` names every live Python thread other
than the one running the check and the kernel's own (recorded when the kernel started, or,
outside grading, when the setup cell ran); a check refuses to grade while there is one. The
kernel's threads that run an event loop (IOPub, control, shell channel) could be handed work
too: :func:`watch_kernel_threads` installs the recording on them, through their own loops,
before the first cell; whatever would take it off again is seen by the recording itself as it
is called, and every later check refuses to grade.
"""
from __future__ import annotations

import importlib
import itertools
import operator
import os
import sys
import threading
import time
import types
# The record's own references: a learner's change to builtins, operator, types, sys or threading
# cannot blind the look that would find it.
from builtins import (all, any, callable, classmethod, dict, frozenset, getattr, id,  # noqa: A004 - the record binds the builtins it uses
                      isinstance, issubclass, len, list, map, next, object, set, sorted,
                      staticmethod, tuple, type)

_is = operator.is_
_itemgetter = operator.itemgetter
_ModuleType, _FunctionType, _MethodType = types.ModuleType, types.FunctionType, types.MethodType
_modules = sys.modules
_current_frames = sys._current_frames
_enumerate_threads = threading.enumerate
_get_ident = threading.get_ident
_monotonic, _sleep = time.monotonic, time.sleep
_getpid, _listdir, _os_open, _os_read, _os_close = os.getpid, os.listdir, os.open, os.read, os.close
try:
    _clock, _cpu_clock = time.clock_gettime_ns, time.pthread_getcpuclockid
except AttributeError:  # pragma: no cover - not on Linux
    _clock = _cpu_clock = None

# The namespaces the checks (visible and hidden) and what they call use. Each is recorded with
# its functions, classes and modules; the classes defined in them with their whole __dict__.
LIBRARY_MODULES = (
    "torch", "torch.nn", "torch.nn.functional", "torch.nn.init", "torch.linalg", "torch.random",
    "torch.functional", "torch._tensor", "torch.overrides", "torch.autograd",
    "torch.autograd.grad_mode", "torch.utils._python_dispatch", "torch.nn.modules.module",
    "torch.nn.parameter", "torch._C._nn", "torch.testing",
    "numpy", "numpy.linalg", "numpy.testing", "numpy.random", "numpy.lib",
    "numpy._core.numeric", "numpy._core.fromnumeric", "numpy._core.multiarray",
    "numpy._core.umath", "numpy._core._methods", "numpy._core.numerictypes",
    "numpy._core.shape_base", "numpy._core.function_base", "numpy._core._ufunc_config",
    "numpy.lib._function_base_impl", "numpy.lib._arraysetops_impl", "numpy.lib._npyio_impl",
    "numpy.lib._shape_base_impl", "numpy.lib._twodim_base_impl", "numpy.linalg._linalg",
    "numpy.testing._private.utils",
    "math", "operator", "functools", "contextlib", "io", "os", "time", "threading", "_thread",
    "inspect", "types", "traceback", "importlib", "copy",
    # what the kernel's own threads that run no event loop call (work handed to them by
    # replacing what they call would run beyond the recording's sight)
    "ipykernel.iostream", "ipykernel.parentpoller", "ipykernel.heartbeat", "IPython.core.history",
    "zmq.utils.garbage",
)
# The course's own checks: every value, containers by their contents too.
COURSE_PACKAGES = ("course_utils.checks",)
# Built-ins the checks call (IPython swaps exit/quit/get_ipython around each cell: not these).
BUILTINS = ("abs", "all", "any", "bool", "callable", "dict", "enumerate", "float", "getattr",
            "hasattr", "int", "isinstance", "issubclass", "iter", "len", "list", "map", "max",
            "min", "next", "object", "print", "range", "repr", "round", "set", "sorted", "str",
            "sum", "super", "tuple", "type", "vars", "zip", "__import__", "__build_class__",
            "frozenset", "id", "divmod", "pow", "format", "slice", "reversed", "filter")
_LIBRARY_ROOTS = ("torch", "numpy")
try:
    import numpy as _np

    _DISPATCHER = type(_np.allclose)  # numpy._ArrayFunctionDispatcher: wraps a Python function
except (ImportError, AttributeError):  # pragma: no cover
    _DISPATCHER = None


_DATA = (type(None), bool, int, float, complex, str, bytes)
_CODE = operator.attrgetter("__code__")
_DEFAULTS = operator.attrgetter("__defaults__")
_KWDEFAULTS = operator.attrgetter("__kwdefaults__")
_CELL = operator.attrgetter("cell_contents")
_chain = itertools.chain.from_iterable
_repeat = itertools.repeat
_call = getattr(operator, "call", None) or (lambda function, *args: function(*args))  # 3.10


def _names_only(keys) -> bool:
    """Whether every key is a ``str`` (no subclass), looked at by its type alone: a key of
    another class would run its ``__eq__`` or ``__hash__`` in any lookup that meets it."""
    return all(map(_is, map(type, keys), _repeat(str)))


def _is_tool(value) -> bool:
    return callable(value) or issubclass(type(value), _ModuleType)


_MODULE_DICT = _ModuleType.__dict__["__dict__"].__get__  # a module's own dict, whatever its class


def _module_name(value) -> str | None:
    """A module's ``__name__`` as its own dict holds it (None for what is not a module, or a
    name that is not a str), read without running anything its class defines."""
    if not issubclass(type(value), _ModuleType):
        return None
    name = dict.get(_MODULE_DICT(value), "__name__")
    return name if type(name) is str else None


def _function(value):
    """The Python function behind a value: itself, a method's, or a NumPy dispatcher's."""
    if type(value) in (classmethod, staticmethod, _MethodType):
        return value.__func__
    if type(value) is _DISPATCHER:
        return value._implementation
    return value


_EMPTY = object()  # an empty closure cell, as recorded
_END = object()  # the end of a container, in a snapshot of contents


def _internals(value):
    """What can be changed in place in a Python function: its code, defaults, keyword defaults
    (the dict and what it holds) and closure (each cell and what it holds). Values are held by
    reference and compared by identity: an object that only says it is equal (``__eq__``), or
    prints the same (``__repr__``), is not what was recorded, and no learner code runs."""
    func = _function(value)
    if type(func) is not _FunctionType:
        return None
    kw = func.__kwdefaults__
    closure = func.__closure__
    cells = None
    if closure:
        cells = []
        for cell in closure:
            try:
                cells.append((cell, cell.cell_contents))
            except ValueError:
                cells.append((cell, _EMPTY))
        cells = tuple(cells)
    kwdefaults = (kw, tuple(dict.keys(kw)), tuple(dict.values(kw))) if type(kw) is dict else kw
    return (func.__code__, func.__defaults__, kwdefaults, cells)


def _same_objects(now, then) -> bool:
    return len(now) == len(then) and all(map(_is, now, then))


def _same_internals(value, inner) -> bool:
    func = _function(value)
    if type(func) is not _FunctionType:
        return False
    if func.__code__ is not inner[0] or func.__defaults__ is not inner[1]:
        return False
    kw, kwdefaults = func.__kwdefaults__, inner[2]
    if type(kwdefaults) is tuple:
        if kw is not kwdefaults[0] or not (_same_objects(tuple(dict.keys(kw)), kwdefaults[1])
                                          and _same_objects(tuple(dict.values(kw)), kwdefaults[2])):
            return False
    elif kw is not kwdefaults:
        return False
    if inner[3] is not None:
        for cell, contents in inner[3]:
            try:
                if cell.cell_contents is not contents:
                    return False
            except ValueError:
                if contents is not _EMPTY:
                    return False
    return True


_CONTAINER_TYPES = (list, tuple, dict, set, frozenset)
_CONTENTS_DEPTH = 32


def _contents(value):
    """A snapshot of a container's contents, nested containers' too (a check's list of
    forbidden names, cleared in place, would forbid nothing; a tolerance in a dict, replaced by
    a float subclass that prints as the old one, would pass anything): every object held, by
    reference, in order, to be compared by identity. None for what is not a container."""
    if not issubclass(type(value), _CONTAINER_TYPES):
        return None
    out: list = []
    _snapshot(value, out, 0)
    return tuple(out)


def _snapshot(value, out: list, depth: int) -> None:
    out.append(value)
    kind = type(value)
    if depth >= _CONTENTS_DEPTH or not issubclass(kind, _CONTAINER_TYPES):
        return
    # the base types' own iteration: a subclass's __iter__ (a learner could set it) never runs
    if issubclass(kind, dict):
        for key, item in dict.items(value):
            out.append(key)
            _snapshot(item, out, depth + 1)
    else:
        base = next(t for t in _CONTAINER_TYPES if issubclass(kind, t))
        for item in list(base.__iter__(value)):
            _snapshot(item, out, depth + 1)
    out.append(_END)


class _Record:
    """One namespace: name -> (value, internals, contents) of what it held when recorded."""

    __slots__ = ("label", "owner", "space", "entries", "size", "keys", "kind", "everything",
                 "is_class", "_get", "_values", "_funcs", "_codes", "_defaults", "_kwdefaults",
                 "_kwdicts", "_kwlens", "_kwkeys", "_kwvalues", "_cells", "_cell_contents",
                 "_careful")

    def __init__(self, label: str, owner, everything: bool):
        self.label, self.owner, self.everything = label, owner, everything
        self.is_class = isinstance(owner, type)
        # a module's dict, a class's live view of its own (neither can be swapped for another)
        space = self.space = owner.__dict__ if self.is_class or isinstance(owner, _ModuleType) else owner
        self.entries = {}
        for name, value in list(space.items()):
            if type(name) is not str:
                continue  # not a name: nothing of it is looked at
            if not self.is_class and name[:2] == "__" == name[-2:]:
                continue  # a module's __builtins__, __spec__ ...: its functions hold their own
            if everything and (value is None or type(value) is bool):
                continue  # a module's flag (set once it has done something), not a tool
            if self.is_class and issubclass(type(value), _DATA):
                continue  # a class's counter or setting, not how it behaves
            if everything or self.is_class or _is_tool(value):
                self.entries[name] = (value, _internals(value), _contents(value) if everything else None)
        self.size = len(space)
        # every name of the namespace, in order (a name removed and one added keep its size; a
        # key put in again moves to the end), and the class of what owns it (a module's
        # __class__ can be set to a subclass whose __getattribute__ answers what it likes)
        self.keys = tuple(space)
        self.kind = type(owner)
        self._prepare()

    def _prepare(self) -> None:
        """What the seal's fast look (``_Flat``) compares for this record, in C loops: the
        values, the functions' code, defaults and keyword defaults (each dict, its length, keys
        and values), the contents of their closures' cells; the few with an empty cell, or with
        contents, are looked at one by one (``careful_change``)."""
        names = tuple(self.entries)
        self._get = _itemgetter(*names) if len(names) > 1 else (
            (lambda space, name=names[0]: (space[name],)) if names else (lambda space: ()))
        self._values = tuple(value for value, _, _ in self.entries.values())
        funcs, codes, defaults, kwdefaults, careful = [], [], [], [], []
        kwdicts, kwkeys, kwvalues, cells, cell_contents = [], [], [], [], []
        for name, (value, inner, contents) in self.entries.items():
            if inner is not None:
                funcs.append(_function(value))
                codes.append(inner[0])
                defaults.append(inner[1])
                kw = inner[2]
                if type(kw) is tuple:
                    kwdefaults.append(kw[0])
                    kwdicts.append(kw[0])
                    kwkeys.extend(kw[1])
                    kwvalues.extend(kw[2])
                else:
                    kwdefaults.append(kw)
                if inner[3] is not None:
                    if any(contents is _EMPTY for _, contents in inner[3]):
                        careful.append(name)
                    else:
                        cells.extend(cell for cell, _ in inner[3])
                        cell_contents.extend(contents for _, contents in inner[3])
            if contents is not None:
                careful.append(name)
        self._funcs, self._codes, self._defaults = tuple(funcs), tuple(codes), tuple(defaults)
        self._kwdefaults, self._kwdicts = tuple(kwdefaults), tuple(kwdicts)
        self._kwlens = tuple(map(len, kwdicts))  # where one dict's keys end and the next's begin
        self._kwkeys, self._kwvalues = tuple(kwkeys), tuple(kwvalues)
        self._cells, self._cell_contents = tuple(cells), tuple(cell_contents)
        self._careful = tuple(dict.fromkeys(careful))

    def first_change(self) -> str | None:
        space = self.space
        if type(self.owner) is not self.kind:
            return f"{self.label} (its class) is not what it was"
        keys = tuple(space)
        if self.keys is not None and not _same_objects(keys, self.keys):
            if not _names_only(keys):
                # looked up, such a key would run its __eq__: nothing is looked up
                return f"{self.label}.<a key that is not a name> was added"
            self.size = None  # the names changed: _additions looks at each
        return self._first_change(space)  # (the fast look is the seal's, over every record)

    def careful_change(self) -> str | None:
        """The look, one by one, at what the seal's fast look leaves out (contents, empty
        cells)."""
        for name in self._careful:
            value, inner, contents = self.entries[name]
            if inner is not None and not _same_internals(value, inner):
                return f"{self.label}.{name} (its code, defaults or closure) is not what it was"
            if contents is not None and not _same_objects(_contents(value), contents):
                return f"{self.label}.{name} (its contents) is not what it was"
        return None

    def _first_change(self, space) -> str | None:
        """The look one entry at a time: which one changed."""
        get = space.get
        missing = object()
        for name, (value, inner, contents) in self.entries.items():
            now = get(name, missing)
            if now is not value:
                return f"{self.label}.{name} is not what it was"
            if inner is not None and not _same_internals(now, inner):
                return f"{self.label}.{name} (its code, defaults or closure) is not what it was"
            if contents is not None and not _same_objects(_contents(now), contents):
                return f"{self.label}.{name} (its contents) is not what it was"
        return self._additions(space)

    def _additions(self, space) -> str | None:
        if self.size is None or len(space) != self.size:
            added = self._added(space)
            if added:
                return f"{self.label}.{added} was added"
            # only submodules imported since, or names that cannot shadow a lookup: look again
            # when the names change
            self.size, self.keys = len(space), tuple(space)
        return None

    def _added(self, space) -> str | None:
        """A name added since the record that could shadow a lookup (a module's new submodule,
        imported since, cannot; a class's new attribute or a module's new global can)."""
        prefix = getattr(self.owner, "__name__", "") + "."
        # what was added may be the learner's: its key and value are looked at by their types
        # alone, never hashed, compared or asked for an attribute (that would run their code)
        for name, value in list(space.items()):
            if type(name) is not str:
                return "<a key that is not a name>"
            if name in self.entries or (self.everything and (value is None or type(value) is bool)):
                continue
            if self.is_class and issubclass(type(value), _DATA):
                continue
            if not self.is_class and not self.everything and not _is_tool(value):
                continue
            if (_module_name(value) == prefix + name and _modules.get(prefix + name) is value
                    and not callable(value)):
                continue  # a submodule imported since: the import system sets it
            if not self.is_class and name.startswith("__") and name.endswith("__"):
                continue
            return name
        return None


class _Seal:
    def __init__(self):
        self.records: list[_Record] = []
        self.covered: set[int] = set()
        self.modules: dict[str, _ModuleType] = {}
        self.at_kernel_start = False
        self.modules_seen = 0
        self.pending = False
        self.by_label: dict[str, _Record] = {}
        self._flat: _Flat | None = None  # every record's fast look at once; None once they change

    def add_module(self, name: str, everything: bool = False) -> None:
        module = _modules.get(name)
        if module is None or id(module) in self.covered:
            return
        self.covered.add(id(module))
        self.modules[name] = module
        self._flat = None
        self.records.append(_Record(name, module, everything))
        self.by_label[name] = self.records[-1]
        for value in list(vars(module).values()):
            if isinstance(value, type) and id(value) not in self.covered and _mutable_class(value):
                owner = getattr(value, "__module__", "") or ""
                if everything or owner == name or owner.split(".")[0] in _LIBRARY_ROOTS:
                    self.covered.add(id(value))
                    self.records.append(_Record(f"{owner}.{value.__qualname__}", value, False))

    def retake_standard_library(self) -> None:
        """Record again the namespaces outside the libraries and the course (torch, imported
        after they were recorded, patches ``inspect.getfile``). Only outside grading: a
        grading kernel imports torch before it records anything."""
        for index, record in enumerate(self.records):
            label = record.label
            if (isinstance(record.owner, _ModuleType) and not record.everything
                    and label.split(".")[0] not in _LIBRARY_ROOTS and label != "builtins"):
                self.records[index] = self.by_label[label] = _Record(label, record.owner, False)
        self._flat = None

    def add_object(self, label: str, obj) -> None:
        """An instance's own attributes (its functions and objects that can be called)."""
        space = getattr(obj, "__dict__", None)
        if isinstance(space, dict) and id(space) not in self.covered:
            self.covered.add(id(space))
            self._flat = None
            self.records.append(_Record(label, space, False))

    def add_builtins(self) -> None:
        import builtins

        space = {name: getattr(builtins, name) for name in BUILTINS if hasattr(builtins, name)}
        self._flat = None
        self.records.append(_Builtins(space))

    def first_change(self) -> str | None:
        """The first change, in the order of the records. Every record is looked at in a few C
        loops over all of them at once; only when those see a difference (or a namespace grew)
        are the records looked at one by one, to name it."""
        flat = self._flat
        if flat is None:
            flat = self._flat = _Flat(self)
        if flat.in_place():
            return None
        for name, module in self.modules.items():
            if _modules.get(name) is not module:
                return f"_modules[{name!r}] is not what it was"
        self._flat = None  # a namespace that only grew by a submodule is looked at anew
        for record in self.records:
            found = record.first_change()
            if found:
                return found
        return None


class _Flat:
    """What every record's fast look compares, joined: the modules in ``sys.modules``, the
    class of every owner, every namespace's names in order (before anything is looked up in
    it), every recorded value (each namespace read through its record's getter), every
    function's code, defaults, keyword defaults and closure; then the records with entries to
    look at one by one."""

    __slots__ = ("names", "modules", "owners", "kinds", "keyed", "keys", "plain", "getters",
                 "spaces", "values", "funcs", "codes", "defaults", "kwdefaults", "kwdicts",
                 "kwlens", "kwkeys", "kwvalues", "cells", "cell_contents", "careful")

    def __init__(self, seal: _Seal):
        records = seal.records
        self.names, self.modules = tuple(seal.modules), tuple(seal.modules.values())
        self.owners = tuple(record.owner for record in records)
        self.kinds = tuple(record.kind for record in records)
        self.keyed = tuple(record.space for record in records if record.keys is not None)
        self.keys = tuple(_chain(record.keys for record in records if record.keys is not None))
        self.plain = tuple(record.space for record in records if record.keys is None)
        self.getters = tuple(record._get for record in records)
        self.spaces = tuple(record.space for record in records)
        for part in ("values", "funcs", "codes", "defaults", "kwdefaults", "kwdicts", "kwlens",
                     "kwkeys", "kwvalues", "cells", "cell_contents"):
            setattr(self, part, tuple(_chain(getattr(record, "_" + part) for record in records)))
        self.careful = tuple(record for record in records if record._careful)

    def in_place(self) -> bool:
        if not (_same_objects(tuple(map(_modules.get, self.names)), self.modules)
                and all(map(_is, map(type, self.owners), self.kinds))
                # the names first, by identity: a key that is not one would run its __eq__ in
                # any lookup that meets it
                and _same_objects(tuple(_chain(self.keyed)), self.keys)
                and _names_only(_chain(self.plain))):
            return False
        try:
            now = tuple(_chain(map(_call, self.getters, self.spaces)))
        except KeyError:  # a name removed
            return False
        if not (_same_objects(now, self.values)
                and all(map(_is, map(_CODE, self.funcs), self.codes))
                and all(map(_is, map(_DEFAULTS, self.funcs), self.defaults))
                and all(map(_is, map(_KWDEFAULTS, self.funcs), self.kwdefaults))
                and tuple(map(len, self.kwdicts)) == self.kwlens
                and _same_objects(tuple(_chain(map(dict.keys, self.kwdicts))), self.kwkeys)
                and _same_objects(tuple(_chain(map(dict.values, self.kwdicts))), self.kwvalues)):
            return False
        try:
            if not all(map(_is, map(_CELL, self.cells), self.cell_contents)):
                return False
        except ValueError:  # a cell emptied since
            return False
        return not any(record.careful_change() for record in self.careful)


class _Builtins(_Record):
    """The built-ins the checks call, and only those (IPython swaps others around each cell)."""

    def __init__(self, space: dict):
        import builtins

        self.label, self.owner, self.everything, self.is_class = "builtins", builtins, False, False
        self.space = builtins.__dict__
        self.entries = {name: (value, None, None) for name, value in space.items()}
        self.size = None
        self.keys = None  # its names are not compared (IPython swaps some around each cell)
        self.kind = type(builtins)
        self._prepare()

    def first_change(self) -> str | None:
        if not _names_only(self.space):
            return "builtins.<a key that is not a name> was added"  # before any lookup in it
        return super().first_change()

    def _additions(self, space) -> str | None:
        return None


def _mutable_class(cls: type) -> bool:
    """A class whose attributes can be set (a Python class, not an immutable C type)."""
    return not cls.__flags__ & _IMMUTABLE_TYPE


_IMMUTABLE_TYPE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE


_SEAL: _Seal | None = None
_LOCK = threading.RLock()


def take() -> None:
    """Record the namespaces (once per process: the first record of each is the one that
    counts). A library not imported yet is recorded once it is (a NumPy-only notebook does not
    pay for importing torch); a grading kernel imports them all first (``load_libraries``)."""
    global _SEAL
    with _LOCK:
        if _SEAL is None:
            seal = _Seal()
            seal.add_builtins()
            _SEAL = seal
            _take_threads()
        _protect_late(_SEAL)


def load_libraries() -> None:
    """Import the libraries the checks use, and what torch imports the first time a check
    records its operators, so that all of it is recorded before any learner code runs."""
    for root in _LIBRARY_ROOTS:
        importlib.import_module(root)
    take()


def _protect_late(seal: _Seal) -> None:
    """Record the library namespaces and the checks' modules imported since (each once it has
    finished importing)."""
    if len(_modules) == seal.modules_seen and not seal.pending:
        return
    seal.pending = False
    roots = {name.split(".")[0] for name in LIBRARY_MODULES}
    for root in sorted(roots, key=lambda r: (r != "torch", r)):
        if root in _modules and root not in seal.modules:
            if root == "torch":
                _warm_torch()  # what it wraps the first time a check records: before the record
                seal.retake_standard_library()  # importing torch changes some (inspect.getfile)
            for name in LIBRARY_MODULES:
                if name.split(".")[0] == root:
                    if name not in _modules:
                        try:
                            importlib.import_module(name)
                        except ImportError:
                            continue
                    seal.add_module(name)
    _protect_course_modules(seal)
    seal.modules_seen = len(_modules)


def original(module: str, name: str):
    """``module.name`` as recorded (recording ``module`` now if it had not been imported)."""
    take()
    record = _SEAL.by_label.get(module)
    if record is None or name not in record.entries:
        raise LookupError(f"{module}.{name} was not recorded")
    return record.entries[name][0]


def _warm_torch() -> None:
    """What torch imports (and wraps) the first time an operator runs under a dispatch mode, as
    every recording check does: done before the record, so that it is part of it."""
    try:
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode
    except ImportError:  # pragma: no cover
        return

    class _Warm(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with _Warm():
        torch.zeros(1).add(1)


def protect(*modules: _ModuleType) -> None:
    """Record these modules too (the hidden checks, when the kernel loads them at its start):
    every value they hold, containers by their contents."""
    take()
    with _LOCK:
        for module in modules:
            _SEAL.add_module(module.__name__, everything=module.__name__ != __name__)


def _protect_course_modules(seal: _Seal) -> None:
    for name, module in list(_modules.items()):
        if type(name) is not str:  # not a module's name (changed() says so): never compared
            continue
        if (module is None or id(module) in seal.covered
                or not any(name == p or name.startswith(p + ".") for p in COURSE_PACKAGES)):
            continue
        if getattr(getattr(module, "__spec__", None), "_initializing", False):
            seal.pending = True
            continue
        seal.add_module(name, everything=name != __name__)  # this module: its tools


def _module_names_only() -> bool:
    """Whether every key of ``sys.modules`` is a ``str`` (no subclass), looked at without
    hashing or comparing any of them: a key of a class of the learner's would run its
    ``__eq__`` or ``__hash__`` in any lookup that meets it, the checks' own included (``"torch"
    in sys.modules``), outside any recording."""
    try:
        return _names_only(_modules)
    except RuntimeError:  # it changed size while looked at: another thread
        return False


def changed() -> str | None:
    """What is no longer as recorded (``"torch.equal is not what it was"``), or a torch mode
    left entered; None when all is in place. ``sys.modules`` first, before any lookup in it."""
    if not _module_names_only():
        return "sys.modules (a key that is not a module's name was added) is not what it was"
    take()
    found = _SEAL.first_change()
    if found:
        return found
    torch = _modules.get("torch")
    if torch is not None:
        if torch._C._len_torch_function_stack():
            return "a torch function mode was left entered"
        if torch._C._len_torch_dispatch_stack():
            return "a torch dispatch mode was left entered"
        if not torch._C._is_torch_function_enabled():
            return "torch functions were switched off (DisableTorchFunction)"
    return None


# --------------------------------------------------------------------------- threads

_OWN_THREADS: dict[int, str] = {}
_KERNEL_THREADS_FIXED = False
_LATE: list = []  # the kernel's own threads started after the record (its parent poller)
_IDLE: dict[int, str] = {}  # the kernel's threads that run Python code only when handed work


def _cpu(ident: int) -> int | None:
    try:
        return _clock(_cpu_clock(ident))
    except (OSError, TypeError, OverflowError):
        return None


def idle_threads_now(settle: float = 0.001, patience: float = 0.25) -> dict[int, int | None]:
    """CPU time of each of the kernel's idle threads, taken once they are quiet (two looks
    ``settle`` seconds apart agree; at most ``patience`` seconds of waiting)."""
    if not _IDLE:
        return {}
    deadline = _monotonic() + patience
    now = {ident: _cpu(ident) for ident in _IDLE}
    while True:
        _sleep(settle)
        again = {ident: _cpu(ident) for ident in _IDLE}
        if again == now or _monotonic() > deadline:
            return again
        now = again


def ran_meanwhile(before: dict[int, int | None]) -> list[str]:
    """The kernel's idle threads that ran since ``before`` (from :func:`idle_threads_now`)."""
    return [_IDLE[ident] for ident, cpu in before.items() if _cpu(ident) != cpu]


def _live_threads() -> dict[int, str]:
    """ident -> name of every thread that runs Python code now, or that threading knows."""
    found = {t.ident: t.name for t in _enumerate_threads() if t.ident is not None}
    for ident in _current_frames():
        found.setdefault(ident, f"thread {ident}")
    return found


def _take_threads() -> None:
    _OWN_THREADS.clear()
    _OWN_THREADS.update(_live_threads())
    _OWN_PROCESSES.clear()
    _OWN_PROCESSES.update(_descendants())


# The same for processes: work handed to a process forked before the check (through a pipe, a
# socket, shared memory) runs beyond any recording of this one. A check refuses to grade while
# a process descended from the kernel lives that was not there when the threads were taken.
_OWN_PROCESSES: set[int] = set()
PR_SET_CHILD_SUBREAPER = 36


def _descendants() -> dict[int, str]:
    """pid -> name of every live (not zombie) process descended from this one, read from /proc
    (nothing where there is none)."""
    me = _getpid()
    try:
        entries = _listdir("/proc")
    except OSError:
        return {}
    parents: dict[int, tuple[int, str]] = {}
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            fd = _os_open(f"/proc/{entry}/stat", os.O_RDONLY)
            try:
                data = _os_read(fd, 4096)
            finally:
                _os_close(fd)
        except OSError:  # ended meanwhile
            continue
        close = data.rfind(b")")
        fields = data[close + 2:].split()
        if close < 0 or len(fields) < 2 or fields[0] in (b"Z", b"X"):
            continue
        parents[int(entry)] = (int(fields[1]), data[data.find(b"(") + 1:close].decode("utf-8", "replace"))
    found: dict[int, str] = {}
    frontier = {me}
    while frontier:
        frontier = {pid for pid, (ppid, _) in parents.items() if ppid in frontier and pid not in found}
        for pid in frontier:
            found[pid] = parents[pid][1]
    return found


def foreign_processes() -> list[str]:
    """The live processes descended from this one that were not there when its own threads
    were taken ("process 123 (python)")."""
    return sorted(f"process {pid} ({name})" for pid, name in _descendants().items()
                  if pid not in _OWN_PROCESSES)


def _adopt_orphans() -> None:
    """Under grading: become the subreaper of what this kernel starts (Linux), so that a process
    forked twice, whose parent ended, is still this kernel's descendant and seen."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass


def own_threads_now() -> None:
    """Outside grading (the learner's Jupyter, tests run in one process): the threads alive when
    the setup cell runs are the kernel's own. Under grading they were fixed at the kernel's
    start, before any cell, and stay so."""
    if not _KERNEL_THREADS_FIXED:
        take()
        if "zmq" in _modules:  # in a kernel: what it would start later is started now
            _zmq_garbage_collector()
        _take_threads()


def foreign_threads() -> list[str]:
    """Names of the live Python threads that are neither the one asking nor the kernel's own."""
    me = _get_ident()
    for thread in list(_LATE):
        if thread.ident is not None:  # started since: its first ident is the one that counts
            _OWN_THREADS.setdefault(thread.ident, thread.name)
            _LATE.remove(thread)
    found = [(ident, name) for ident, name in _live_threads().items()
             if ident != me and ident not in _OWN_THREADS]
    if found and not _KERNEL_THREADS_FIXED:
        # outside grading (the learner's Jupyter, tests in one process), a library's own
        # machinery started since the setup cell (IPython's history, pyzmq's collector) is let be
        threads = {t.ident: t for t in _enumerate_threads()}
        found = [(ident, name) for ident, name in found if not _library_thread(threads.get(ident))]
    return sorted(name for _, name in found)


# Threads that run whatever they are handed: never a library's own machinery.
_GENERIC = ("concurrent" + os.sep + "futures", os.sep + "threading.py", os.sep + "asyncio" + os.sep,
            os.sep + "multiprocessing" + os.sep, os.sep + "sched.py", os.sep + "socketserver.py",
            os.sep + "queue.py")
_LIBRARY_FOLDERS = tuple({os.path.dirname(os.__file__) + os.sep,
                          os.path.dirname(os.path.dirname(os.path.dirname(threading.__file__))) + os.sep}
                         | {os.path.dirname(os.path.dirname(getattr(_modules.get(m), "__file__", "") or ""))
                            + os.sep for m in ("IPython", "zmq", "ipykernel", "torch", "numpy")
                            if getattr(_modules.get(m), "__file__", None)})


def _library_thread(thread) -> bool:
    """Whether ``thread`` runs a library's own code (its ``run``, or its target), not a pool,
    a timer or a loop that runs what it is handed, nor the learner's code."""
    if thread is None:
        return False
    code = getattr(getattr(type(thread), "run", None), "__code__", None)
    if code is threading.Thread.run.__code__:
        target = getattr(thread, "_target", None)
        code = getattr(getattr(target, "__func__", target), "__code__", None)
    if code is None:
        return False
    filename = code.co_filename
    return (any(filename.startswith(folder) for folder in _LIBRARY_FOLDERS)
            and "site-packages" in filename and not any(part in filename for part in _GENERIC))


def kernel_started(app=None) -> None:
    """Under grading, before the notebook's first cell: record everything and the kernel's own
    threads, and watch those that run an event loop."""
    global _KERNEL_THREADS_FIXED
    take()
    if _SEAL is not None:
        _SEAL.at_kernel_start = True
    collector = _zmq_garbage_collector()
    _adopt_orphans()
    _take_threads()
    _KERNEL_THREADS_FIXED = True
    if app is None:
        return
    poller = getattr(app, "poller", None)
    if poller is not None and poller.ident is None:
        _LATE.append(poller)  # the kernel starts it after loading its extensions
    with _LOCK:
        for label, obj in (("the kernel's parent poller", poller), ("zmq's garbage collector", collector)):
            if obj is not None:
                _SEAL.add_object(label, obj)
    watch_kernel_threads(app)
    watch_relay_threads((sys.stdout, sys.stderr))
    watch_history_thread(getattr(getattr(app, "shell", None), "history_manager", None))
    # any other thread of the kernel's that runs Python code (none, in the kernels the course
    # knows): idle unless handed something, a check sees whether it ran while the learner's
    # code did.
    # not these: a C loop; a sleep-and-look loop; one woken by zmq whenever it has sent a large
    # output (possibly while a check runs), that only frees what was sent
    pure = {id(getattr(app, "heartbeat", None)), id(poller), id(getattr(collector, "thread", None))}
    _IDLE.clear()
    for thread in _enumerate_threads():
        if (thread.ident in _OWN_THREADS and thread.ident not in WATCH.threads
                and thread is not threading.main_thread() and id(thread) not in pure):
            _IDLE[thread.ident] = thread.name


def _zmq_garbage_collector():
    """pyzmq's garbage collector, started now: it starts its thread the first time the kernel
    sends a large output without copying it, else in the middle of the notebook."""
    try:
        from zmq.utils.garbage import gc
    except ImportError:  # pragma: no cover - a kernel has pyzmq
        return None
    if not gc.is_alive():
        gc.start()
    return gc


# --------------------------------------------------------------------------- the kernel's threads

# What would take the recording off a kernel thread, or run work beyond its sight.
UNHOOKING = frozenset({
    "setprofile", "settrace", "setprofile_all_threads", "settrace_all_threads", "_setprofile",
    "register_callback", "set_events", "set_local_events", "use_tool_id", "free_tool_id",
    "_unset_dispatch_mode", "_pop_torch_dispatch_mode", "_pop_torch_function_stack",
    "_set_torch_function_mode", "_push_on_torch_dispatch_stack", "_pop_mode",
    "start_new_thread", "start_joinable_thread", "fork", "forkpty", "posix_spawn",
})


class _Watch:
    """The recording installed on the kernel's own event-loop threads: a profile hook and a
    torch dispatch mode that pass everything through and report to the check recording at the
    time. Whatever would take them off (or start a thread, or fork) from such a thread is seen
    by the hook as it is called, at any time: ``broken`` then says so for good."""

    def __init__(self):
        self.recorder = None  # set by a check while the learner's code runs
        self.threads: dict[int, str] = {}  # ident -> name of the threads it is installed on
        self.broken: str | None = None
        self.hook = self._hook

    def _hook(self, frame, event, arg):
        if event == "c_call" and getattr(arg, "__name__", "") in UNHOOKING and self.broken is None:
            self.broken = f"{arg.__name__} on the kernel's {self.threads.get(_get_ident(), 'own')} thread"
        recorder = self.recorder
        if recorder is not None:
            recorder.observe(frame, event, arg)

    def install(self, name: str, done: threading.Event) -> None:
        """Runs on the kernel thread itself."""
        try:
            if "torch" in _modules:
                mode = _passing_mode(self)
                if mode is not None:
                    mode.__enter__()
            sys.setprofile(self.hook)
            self.threads[_get_ident()] = name
        finally:
            done.set()


def _passing_mode(watch: _Watch):
    try:
        from torch.utils._python_dispatch import TorchDispatchMode
    except ImportError:  # pragma: no cover
        return None

    class KernelThreadRecorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            recorder = watch.recorder
            if recorder is not None:
                recorder.observe_op(func)
            return func(*args, **(kwargs or {}))

    return KernelThreadRecorder()


WATCH = _Watch()
WAIT_SECONDS = 10.0


def _kernel_loops(app) -> list:
    """(name, thread, schedule) of the kernel's threads that run an event loop."""
    loops = []
    iopub = getattr(app, "iopub_thread", None)
    if iopub is not None and getattr(iopub, "thread", None) is not None:
        loops.append(("IOPub", iopub.thread, iopub.schedule))
    for attr in ("control_thread", "shell_channel_thread"):
        thread = getattr(app, attr, None)
        loop = getattr(thread, "io_loop", None)
        if thread is not None and loop is not None and thread.is_alive():
            loops.append((thread.name, thread, loop.add_callback))
    return loops


def watch_kernel_threads(app) -> None:
    """Install the recording on the kernel's event-loop threads, through their own loops."""
    for name, thread, schedule in _kernel_loops(app):
        done = threading.Event()
        schedule(lambda name=name, done=done: WATCH.install(name, done))
        if not done.wait(WAIT_SECONDS) or thread.ident not in WATCH.threads:
            WATCH.broken = f"the recording could not be installed on the kernel's {name} thread"


def _quiet_again(thread: threading.Thread, patience: float = 1.0) -> None:
    """Wait until ``thread`` has used no CPU for a few milliseconds (done with what it was
    handed, waiting again)."""
    deadline = _monotonic() + patience
    before = _cpu(thread.ident)
    while _monotonic() < deadline:
        _sleep(0.005)
        now = _cpu(thread.ident)
        if now == before:
            return
        before = now


def watch_relay_threads(streams) -> None:
    """Install the recording on the kernel's threads that relay what is written to the file
    descriptors 1 and 2 (ipykernel's ``OutStream``): each waits for data on its pipe, so it is
    handed one byte, which it passes to the stream's ``write``, here one that installs the
    recording and keeps the byte (its echo goes to /dev/null)."""
    for stream in streams:
        thread = getattr(stream, "watch_fd_thread", None)
        fd = getattr(stream, "_original_stdstream_fd", None)
        space = getattr(stream, "__dict__", None)
        if thread is None or fd is None or not thread.is_alive() or not isinstance(space, dict):
            continue
        done = threading.Event()
        had_write, echo = "write" in space, space.get("_original_stdstream_copy")
        devnull = os.open(os.devnull, os.O_WRONLY)
        space["write"] = lambda data, name=thread.name, done=done: WATCH.install(name, done)
        space["_original_stdstream_copy"] = devnull
        try:
            os.write(fd, b"\n")
            installed = done.wait(WAIT_SECONDS)
            _quiet_again(thread)
        finally:
            if not had_write:
                space.pop("write", None)
            space["_original_stdstream_copy"] = echo
            os.close(devnull)
        if not installed or thread.ident not in WATCH.threads:
            WATCH.broken = f"the recording could not be installed on the kernel's {thread.name} thread"


def watch_history_thread(history) -> None:
    """Install the recording on IPython's thread that saves the history (when there is one):
    it writes the history out when its flag is set, here with a ``writeout_cache`` that
    installs the recording."""
    thread = getattr(history, "save_thread", None)
    space = getattr(history, "__dict__", None)
    if thread is None or not thread.is_alive() or not isinstance(space, dict):
        return
    done = threading.Event()
    space["writeout_cache"] = lambda *args, name=thread.name, done=done: WATCH.install(name, done)
    try:
        thread.save_flag.set()
        installed = done.wait(WAIT_SECONDS)
        _quiet_again(thread)
    finally:
        space.pop("writeout_cache", None)
    if not installed or thread.ident not in WATCH.threads:
        WATCH.broken = f"the recording could not be installed on the kernel's {thread.name} thread"


def kernel_threads_unwatched() -> str | None:
    """Why the kernel's own threads may have run work unseen (None: they cannot have)."""
    return WATCH.broken
