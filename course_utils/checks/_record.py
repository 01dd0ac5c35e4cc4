"""Over 500 lines: a record and its look, on builtins bound once here; a split binds them twice.

How the seal records a namespace and finds it changed (``_seal`` says what is recorded,
when, and why).

``_Record``: one namespace's values, their functions' code, defaults and
closures, containers by their contents, all held by reference and compared by identity;
``_Seal``, every record; ``_Flat``, the fast look over all of them at once, in C loops; a
look that finds a difference names it record by record. Nothing of the learner's code runs
in a look: what it may have added is looked at by its type alone.
"""

from __future__ import annotations

import itertools
import operator
import sys
import types

# The record's own references: a learner's change to builtins, operator, types, sys or threading
# cannot blind the look that would find it.
from builtins import (  # noqa: A004 - the record binds the builtins it uses
    all,
    any,
    callable,
    classmethod,
    dict,
    frozenset,
    getattr,
    id,
    isinstance,
    issubclass,
    len,
    list,
    map,
    next,
    object,
    set,
    staticmethod,
    tuple,
    type,
)

_is = operator.is_
_itemgetter = operator.itemgetter
_ModuleType, _FunctionType, _MethodType = types.ModuleType, types.FunctionType, types.MethodType
_modules = sys.modules

# Built-ins the checks call (IPython swaps exit/quit/get_ipython around each cell: not these).
BUILTINS = (
    "abs",
    "all",
    "any",
    "bool",
    "callable",
    "dict",
    "enumerate",
    "float",
    "getattr",
    "hasattr",
    "int",
    "isinstance",
    "issubclass",
    "iter",
    "len",
    "list",
    "map",
    "max",
    "min",
    "next",
    "object",
    "print",
    "range",
    "repr",
    "round",
    "set",
    "sorted",
    "str",
    "sum",
    "super",
    "tuple",
    "type",
    "vars",
    "zip",
    "__import__",
    "__build_class__",
    "frozenset",
    "id",
    "divmod",
    "pow",
    "format",
    "slice",
    "reversed",
    "filter",
)
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
        if kw is not kwdefaults[0] or not (
            _same_objects(tuple(dict.keys(kw)), kwdefaults[1])
            and _same_objects(tuple(dict.values(kw)), kwdefaults[2])
        ):
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

    __slots__ = (
        "label",
        "owner",
        "space",
        "entries",
        "size",
        "keys",
        "kind",
        "everything",
        "is_class",
        "_get",
        "_values",
        "_funcs",
        "_codes",
        "_defaults",
        "_kwdefaults",
        "_kwdicts",
        "_kwlens",
        "_kwkeys",
        "_kwvalues",
        "_cells",
        "_cell_contents",
        "_careful",
    )

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
        self._get = (
            _itemgetter(*names)
            if len(names) > 1
            else ((lambda space, name=names[0]: (space[name],)) if names else (lambda space: ()))
        )
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
            if (
                _module_name(value) == prefix + name
                and _modules.get(prefix + name) is value
                and not callable(value)
            ):
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
            if (
                isinstance(record.owner, _ModuleType)
                and not record.everything
                and label.split(".")[0] not in _LIBRARY_ROOTS
                and label != "builtins"
            ):
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

    # the parts gathered from every record's own tuple of the same name (``record._<part>``)
    _GATHERED = (
        "values",
        "funcs",
        "codes",
        "defaults",
        "kwdefaults",
        "kwdicts",
        "kwlens",
        "kwkeys",
        "kwvalues",
        "cells",
        "cell_contents",
    )
    __slots__ = ("names", "modules", "owners", "kinds", "keyed", "keys", "plain", "getters", "spaces")
    __slots__ += _GATHERED + ("careful",)

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
        for part in self._GATHERED:
            setattr(self, part, tuple(_chain(getattr(record, "_" + part) for record in records)))
        self.careful = tuple(record for record in records if record._careful)

    def in_place(self) -> bool:
        if not (
            _same_objects(tuple(map(_modules.get, self.names)), self.modules)
            and all(map(_is, map(type, self.owners), self.kinds))
            # the names first, by identity: a key that is not one would run its __eq__ in
            # any lookup that meets it
            and _same_objects(tuple(_chain(self.keyed)), self.keys)
            and _names_only(_chain(self.plain))
        ):
            return False
        try:
            now = tuple(_chain(map(_call, self.getters, self.spaces)))
        except KeyError:  # a name removed
            return False
        if not (
            _same_objects(now, self.values)
            and all(map(_is, map(_CODE, self.funcs), self.codes))
            and all(map(_is, map(_DEFAULTS, self.funcs), self.defaults))
            and all(map(_is, map(_KWDEFAULTS, self.funcs), self.kwdefaults))
            and tuple(map(len, self.kwdicts)) == self.kwlens
            and _same_objects(tuple(_chain(map(dict.keys, self.kwdicts))), self.kwkeys)
            and _same_objects(tuple(_chain(map(dict.values, self.kwdicts))), self.kwvalues)
        ):
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
