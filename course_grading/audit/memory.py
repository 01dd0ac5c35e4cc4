"""The audit child's routes to raw memory, closed before the first cell: each is a write
anywhere in the process with no audit event, which could rewrite the record's hook or kernels.

    seal_numpy      numpy builds an array on whatever address an object's ``__array_interface__``
                    names (``"data": (address, False)``), with whatever strides it says
                    (``as_strided`` makes its views so), or on what an ``__array_struct__``
                    capsule points at
    seal_torch      torch's functions that take a raw address or a raw object pointer
                    (``RAW_FUNCTIONS``; a wrapper subclass's storage offset is one), its
                    tensor-expression compiler (``torch._C._te``: a
                    store at any index, into any address), a storage resized under the tensors
                    that use it (``resize_``: theirs then overflows it)
    refuse_kernels  at the dispatcher: every kernel of a sparse layout and every one that makes
                    a sparse tensor (its indices are not checked unless asked: one out of range
                    writes out of bounds), a storage resized by an operator
                    (``inductor::resize_storage_bytes_``), a view past its storage
                    (``aten::_reshape_alias``: checked), the backward kernels of max pooling and
                    embedding bags given indices (``INDEXED``)
    no_proc_writes  Landlock: no file under /proc opened for writing (``/proc/self/mem``, however
                    its path is spelled)
    seal_ctypes     ctypes itself, imported by torch: no ctypes object made, no foreign call

Each closed route raises an audit event named ``RAW`` + what it was (ctypes: ``SEALED``) with
the cell and line that tried: the hook writes it as an escape. Each seal checks the layout it
writes against what the interpreter reports and returns False, changing nothing, where it does
not know it (another interpreter or machine), as ``no_proc_writes`` does without Landlock;
``tests/test_audit_memory.py`` asserts that each takes on the course's.
"""

import datetime
import functools
import re
import sys

RAW = "memory."  # the events of a closed route: RAW + what was tried
NUMPY = RAW + "numpy.array_interface"
CAPSULE = type(datetime.datetime_CAPI)  # what an __array_struct__ holds
INTERFACES = ("__array_interface__", "__array_struct__")
RAW_FUNCTIONS = (  # (module, attribute path): each reads a raw address or pointer as an object
    ("torch._C", "_construct_storage_from_data_pointer"),
    ("torch._C", "_storage_Use_Count"),
    ("torch._C", "StorageBase._set_cdata"),
    ("torch._C", "StorageBase._new_with_weak_ptr"),
    ("torch._C", "StorageBase._free_weak_ref"),
    ("torch._C", "StorageBase._expired"),
    ("torch._C", "StorageBase.resize_"),
    ("torch._C", "TensorBase._make_wrapper_subclass"),  # no storage: its offset is the address
    ("torch._C._aoti", "alloc_tensor_by_stealing_from_void_ptr"),
    ("torch._C._aoti", "alloc_tensors_by_stealing_from_void_ptrs"),
)
COMPILERS = ("torch._C._te",)  # every function and method of these modules
SPARSE_KEYS = ("SparseCPU", "SparseCsrCPU")
MAKERS = re.compile(r"aten::_?(sparse_\w+_tensor|to_sparse)")  # sparse_csr_tensor, _to_sparse_bsc.out, ...
MAKER_KEYS = ("CPU", "CompositeImplicitAutograd", "CompositeExplicitAutograd")
RESIZE = ("inductor::resize_storage_bytes_", "CompositeExplicitAutograd")
ALIAS = ("aten::_reshape_alias", ("CPU", "QuantizedCPU"))  # a view of any size and strides, unchecked
# backward kernels that write (or read) where an index tensor says, unchecked (measured): only a
# backward pass runs them, and the audit runs none
INDEXED = (
    "max_pool2d_with_indices_backward",
    "max_pool3d_with_indices_backward",
    "adaptive_max_pool2d_backward",
    "adaptive_max_pool3d_backward",
    "_embedding_bag_dense_backward",
    "_embedding_bag_per_sample_weights_backward",
)
# CPython 3.11 on a 64-bit machine: where a type keeps its size, flags, constructor and call, a
# slot wrapper the function it wraps, a builtin function and a method descriptor their C side
LAYOUT = {
    "tp_basicsize": 32,
    "tp_call": 128,
    "tp_flags": 168,
    "tp_new": 312,
    "d_wrapped": 48,
    "m_ml": 16,
    "d_method": 40,
}
SEALED = "ctypes.object"  # raised by a sealed ctypes constructor or call


@functools.cache
def libc():
    """The C library (the process's own symbols), loaded once."""
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _method_def(ctypes):
    class MethodDef(ctypes.Structure):  # a builtin function's C side
        _fields_ = [
            ("name", ctypes.c_char_p),
            ("meth", ctypes.c_void_p),
            ("flags", ctypes.c_int),
            ("doc", ctypes.c_char_p),
        ]

    return MethodDef


def _refusal(ctypes, event: str) -> int:
    """The address of a native function (three pointers in, one out) that raises ``event``
    and returns NULL, held by nothing Python can reach: what each sealed route runs instead."""

    def refused(*args, _audit=sys.audit, _event=event, _any=BaseException):  # returns NULL, raises nothing:
        try:  # what a callback raises is printed and its return value left undefined
            _audit(_event)
        except _any:
            pass

    callback = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(refused)
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(callback))
    return ctypes.cast(callback, ctypes.c_void_p).value


def _c_side(obj) -> tuple[int, str] | None:
    """Where ``obj`` (a builtin function, a method descriptor, or a static method or pybind
    method around one) keeps the pointer to its C side, and its name; None for anything else."""
    import types

    function = getattr(obj, "__func__", obj)
    if type(function) is types.BuiltinFunctionType:
        return id(function) + LAYOUT["m_ml"], function.__name__
    if type(function) in (types.MethodDescriptorType, types.ClassMethodDescriptorType):
        return id(function) + LAYOUT["d_method"], function.__name__
    return None


def _check_c_sides(ctypes, functions) -> bool:
    """Each of ``functions`` has a C side where the layout says, named as Python names it."""
    MethodDef = _method_def(ctypes)
    for function in functions:
        side = _c_side(function)
        if side is None:
            return False
        at, name = side
        pointer = ctypes.c_void_p.from_address(at).value
        if not pointer or ctypes.cast(pointer, ctypes.POINTER(MethodDef)).contents.name != name.encode():
            return False
    return True


def _seal_c_sides(ctypes, functions, event: str) -> None:
    """Each of ``functions`` (checked) calls one native function instead: it raises ``event``."""
    method = _method_def(ctypes)(b"sealed", _refusal(ctypes, event), 0x0003, None)  # VARARGS|KEYWORDS
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(method))
    for at in sorted({_c_side(f)[0] for f in functions}):
        ctypes.c_void_p.from_address(at).value = ctypes.addressof(method)


def _torch_targets() -> dict[str, list]:
    """{event: the functions it seals}: ``RAW_FUNCTIONS`` one by one, ``COMPILERS`` whole."""
    import pkgutil
    import types

    found = {}
    for module, path in RAW_FUNCTIONS:
        owner, _, name = f"{module}.{path}".rpartition(".")
        holder = pkgutil.resolve_name(owner)
        value = vars(holder).get(name) if isinstance(holder, type) else getattr(holder, name, None)
        if value is not None:
            found[f"{RAW}{module}.{path}"] = [value]
    for module in COMPILERS:
        namespace, functions = vars(pkgutil.resolve_name(module)), []
        for value in namespace.values():
            members = (
                vars(value).values() if isinstance(value, type) and value.__module__ == module else [value]
            )
            functions += [
                v for v in members if _c_side(v) is not None and not isinstance(v, types.ModuleType)
            ]
        found[f"{RAW}{module}"] = functions
    return found


def seal_torch() -> bool:
    """Before ctypes is sealed: each function ``_torch_targets`` names calls a native function
    that raises its event and returns nothing (the call fails), for every reference to it, and
    again if ``_imp.create_dynamic`` loads its module again (the same objects come back). False,
    nothing changed: a layout this does not know."""
    import ctypes

    if sys.version_info[:2] != (3, 11) or ctypes.sizeof(ctypes.c_void_p) != 8:
        return False
    targets = _torch_targets()
    if not all(_check_c_sides(ctypes, functions) for functions in targets.values()):
        return False
    for event, functions in targets.items():
        _seal_c_sides(ctypes, functions, event)
    return True


def sparse_kernels() -> list[tuple[str, str]]:
    """(operator, key) for every kernel of a sparse layout on the CPU, and for every kernel that
    makes a sparse tensor from dense data (``MAKERS``): a compressed layout's (CSR, CSC, BSR,
    BSC) is built with no kernel of a sparse key run."""
    import torch

    registered = torch._C._dispatch_get_registrations_for_dispatch_key
    return [(name, key) for key in SPARSE_KEYS for name in registered(key)] + [
        (name, key) for key in MAKER_KEYS for name in registered(key) if MAKERS.match(name)
    ]


def refuse_kernels(audit=sys.audit) -> None:
    """At the dispatcher, on any thread and under any mode: every kernel of a sparse layout, and
    every one that makes a sparse tensor, raises ``RAW + "sparse-tensor"``, ``RESIZE`` and
    ``INDEXED`` ``RAW`` + their names, and each fails. No sparse tensor can then be made or
    used, whatever its indices; a storage keeps its size; no index given to a backward kernel
    writes past its output.
    ``ALIAS`` is computed by ``as_strided``, which checks the view against its storage: one
    past it raises ``RAW`` + its name, and fails."""
    import warnings

    import torch

    handles, kernels = {}, {}
    checked = [(ALIAS[0], key) for key in ALIAS[1]]
    registered = torch._C._dispatch_get_registrations_for_dispatch_key("CPU")
    indexed = [(name, "CPU") for name in registered if name[6:].split(".")[0] in INDEXED]  # aten::
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "overriding a previously registered kernel"
        for name, key in (*sparse_kernels(), RESIZE, *indexed, *checked):
            ns, rest = name.split("::", 1)
            lib = handles.get((ns, key))
            if lib is None:
                lib = handles[(ns, key)] = torch._C._dispatch_library("IMPL", ns, key, "", 0)
            sparse = key in SPARSE_KEYS or MAKERS.match(name)
            event = RAW + ("sparse-tensor" if sparse else name.split(".")[0])
            if event not in kernels:
                alias = name == ALIAS[0]
                kernels[event] = (_checked_alias if alias else _refusing_kernel)(event, audit)
            lib.impl(rest, key, kernels[event], False)
    held = tuple(handles.values())
    for kernel in kernels.values():
        kernel.held = held  # the library handles live as long as the dispatcher holds a kernel


def _refusing_kernel(event: str, audit):
    refused = f"{event} is refused here"

    def kernel(*args, **kwargs):
        audit(event)
        raise RuntimeError(refused)

    return kernel


def _checked_alias(event: str, audit):
    import torch

    as_strided, error = torch.ops.aten.as_strided.default, RuntimeError

    def kernel(tensor, size, stride):
        try:
            return as_strided(tensor, size, stride, tensor.storage_offset())
        except error:
            audit(event)
            raise

    return kernel


def no_proc_writes() -> bool:
    """Landlock, on this thread and every thread and process it starts: no file beneath /proc
    opens for writing (every other top folder stays as it was). ``/proc/self/mem`` writes
    anywhere in the process, and a path can name it in ways no check of the name sees (bytes, a
    link, a folder's descriptor). Needs no_new_privs (``hooks.no_new_programs``). False where
    the kernel has no Landlock."""
    import ctypes
    import os

    create, add, restrict, write_file = 444, 445, 446, 1 << 1  # the syscalls; LANDLOCK_ACCESS_FS_WRITE_FILE

    class Ruleset(ctypes.Structure):
        _fields_ = [("handled_access_fs", ctypes.c_uint64)]

    class Beneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    syscall = libc().syscall
    syscall.restype = ctypes.c_long
    if syscall(create, None, 0, 1) < 1:  # LANDLOCK_CREATE_RULESET_VERSION: the ABI
        return False
    ruleset = syscall(create, ctypes.byref(Ruleset(write_file)), ctypes.sizeof(Ruleset), 0)
    if ruleset < 0:
        return False
    try:
        for name in sorted(set(os.listdir("/")) - {"proc"}):
            try:
                fd = os.open("/" + name, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                rule = Beneath(write_file, fd)
                if syscall(add, ruleset, 1, ctypes.byref(rule), 0) != 0:  # LANDLOCK_RULE_PATH_BENEATH
                    return False
            finally:
                os.close(fd)
        return syscall(restrict, ruleset, 0) == 0
    finally:
        os.close(ruleset)


def _stub(names: tuple[int, int], original: int, check: int, call: int) -> bytes:
    """x86-64, in place of ``_PyObject_LookupAttr(obj, name, &result)``: ``name`` (``rsi``) is
    one of ``names``: ``result = NULL``, then ``call(check, obj, name, NULL)``
    (``PyObject_CallFunctionObjArgs``), and 0 (not found) if it returned (None), -1 with its
    exception set if it raised, as the lookup itself does; else on to ``original``, registers
    untouched."""

    def imm(value: int) -> bytes:
        return value.to_bytes(8, "little")

    compare = [b"\x48\xb8" + imm(n) + b"\x48\x39\xc6" for n in names]  # mov rax, NAME; cmp rsi, rax
    code = compare[0] + b"\x74\x1b" + compare[1] + b"\x74\x0c"  # je looked_up (twice)
    code += b"\x48\xb8" + imm(original) + b"\xff\xe0"  # mov rax, ORIGINAL; jmp rax
    code += b"\x48\xc7\x02\x00\x00\x00\x00"  # looked_up: mov qword [rdx], 0
    code += b"\x48\x89\xf2\x48\x89\xfe\x48\xbf" + imm(check)  # mov rdx, rsi; mov rsi, rdi; mov rdi, CHECK
    code += b"\x31\xc9\x31\xc0\x48\x83\xec\x08"  # xor ecx, ecx; xor eax, eax; sub rsp, 8 (aligned)
    code += b"\x49\xbb" + imm(call) + b"\x41\xff\xd3\x48\x83\xc4\x08"  # mov r11, CALL; call r11; add rsp, 8
    code += b"\x48\x85\xc0\x74\x06"  # test rax, rax; jz raised
    code += b"\x48\xff\x08\x31\xc0\xc3"  # dec qword [rax] (None's count); xor eax, eax; ret
    return code + b"\xb8\xff\xff\xff\xff\xc3"  # raised: mov eax, -1; ret


def _looked_up(
    obj,
    name,
    _getattr=getattr,
    _missing=AttributeError,
    _type=type,
    _issubclass=issubclass,
    _dict=dict,
    _interface=sys.intern(INTERFACES[0]),
    _capsule=CAPSULE,
    _audit=sys.audit,
    _event=NUMPY,
):
    """What numpy's lookup of an interface runs instead (a copy of it, held by nothing Python
    can reach): ``NUMPY`` raised where the object holds a value numpy would build an array on (a
    dict, a capsule); None, for not found, otherwise. What the object's lookup raises, but
    AttributeError, is raised, as the lookup without the seal raises it. Reads no global or
    builtin by name."""
    try:
        kind = _type(_getattr(obj, name))
    except _missing:
        return
    if (kind is _capsule) if name is not _interface else _issubclass(kind, _dict):
        _audit(_event)


def _slots(path: str, value: int) -> list[tuple[int, bool]]:
    """Every aligned word equal to ``value`` in the mappings of ``path`` that the loader wrote: the
    writable ones and the one just before them (read-only after relocation). (address, writable)"""
    import ctypes

    with open("/proc/self/maps", encoding="ascii") as maps:
        rows = [row.split() for row in maps]
    mine = [(r[0], r[1]) for r in rows if len(r) >= 6 and r[5] == path]
    word, found = value.to_bytes(8, "little"), []
    for i, (span, mode) in enumerate(mine):
        if not (mode[1] == "w" or (mode == "r--p" and i + 1 < len(mine) and mine[i + 1][1][1] == "w")):
            continue
        start, end = (int(x, 16) for x in span.split("-"))
        data = ctypes.string_at(start, end - start)
        at = data.find(word)
        while at >= 0:
            if at % 8 == 0:
                found.append((start + at, mode[1] == "w"))
            at = data.find(word, at + 1)
    return found


def seal_numpy() -> bool:
    """Before ctypes is sealed and before any cell: numpy's lookups of ``INTERFACES`` find nothing, and
    ``NUMPY`` is raised where an object holds one numpy would use. Checked before it is changed
    (one entry of numpy's table of imported functions holds the interpreter's
    ``_PyObject_LookupAttr``) and after (an interface on a buffer of its own builds no array on
    it). False, nothing changed: another machine or interpreter, whose layout this does not know."""
    import ctypes
    import platform
    import types

    import numpy
    from numpy._core import _multiarray_umath

    if sys.version_info[:2] != (3, 11) or platform.machine() != "x86_64":
        return False
    lookup = ctypes.cast(ctypes.pythonapi._PyObject_LookupAttr, ctypes.c_void_p).value
    slots = _slots(_multiarray_umath.__file__, lookup)
    if len(slots) != 1:
        return False
    c = libc()
    c.mmap.restype, c.mmap.argtypes = (
        ctypes.c_void_p,
        [ctypes.c_void_p, ctypes.c_size_t] + [ctypes.c_int] * 3 + [ctypes.c_long],
    )
    c.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    read, write, run, page = 1, 2, 4, 4096
    check = types.FunctionType(_looked_up.__code__, {}, None, _looked_up.__defaults__)
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(check))  # held by nothing Python can reach
    call = ctypes.cast(ctypes.pythonapi.PyObject_CallFunctionObjArgs, ctypes.c_void_p).value
    names = tuple(id(sys.intern(n)) for n in INTERFACES)
    code = _stub(names, lookup, id(check), call)
    stub = c.mmap(None, page, read | write, 0x22, -1, 0)  # MAP_PRIVATE | MAP_ANONYMOUS
    if stub in (None, ctypes.c_void_p(-1).value):
        return False
    ctypes.memmove(stub, code, len(code))
    if c.mprotect(stub, page, read | run) != 0:
        return False
    (slot, writable), first = slots[0], slots[0][0] & ~(page - 1)
    if not writable and c.mprotect(first, page, read | write) != 0:
        return False
    ctypes.c_void_p.from_address(slot).value = stub
    if not writable:
        c.mprotect(first, page, read)
    own = bytearray(1)

    class Probe:
        __array_interface__ = {"shape": (1,), "typestr": "|u1", "version": 3}

    Probe.__array_interface__["data"] = (
        numpy.frombuffer(own, numpy.uint8).__array_interface__["data"][0],
        False,
    )
    probe = numpy.asarray(Probe())
    return probe.dtype == object and probe.shape == ()


def seal_ctypes() -> bool:
    """Before the hook: every ctypes type (and every type of ctypes types) is made to construct
    nothing, and every foreign function to call nothing; each try raises ``SEALED`` instead.

    torch imports ctypes, and ``torch.ctypes``, ``object.__subclasses__()`` or a ctypes object's
    methods reach it without an import. Its ready-made helpers (``memmove``, ``memset``,
    ``cast``), a pointer's index, a union of an address and a pointer, a function made from an
    address: none raises an audit event (measured), and each writes to any address. Sealed, they
    cannot run: the constructor and call slots of the types, and the slot wrapper of
    ``CFuncPtr.__call__``, point at one native callback that raises ``SEALED`` (the thread's
    cell and line: the hook writes them) and returns no object; so do the reference counts'
    functions of ``_ctypes`` (``Py_DECREF``: no event either), which come back as the same objects
    if ``_imp.create_dynamic`` loads the module again. False, nothing changed: another
    interpreter, whose layout this does not know."""
    import _ctypes
    import ctypes

    if sys.version_info[:2] != (3, 11) or ctypes.sizeof(ctypes.c_void_p) != 8:
        return False
    word = ctypes.c_ssize_t.from_address
    roots = [_ctypes._SimpleCData.__base__] + [
        type(t)
        for t in (
            _ctypes._SimpleCData,
            _ctypes._Pointer,
            _ctypes.Array,
            _ctypes.Structure,
            _ctypes.Union,
            _ctypes.CFuncPtr,
        )
    ]
    types, todo = [], roots
    while todo:
        cls = todo.pop()
        if cls not in types:
            types.append(cls)
            todo.extend(type.__subclasses__(cls))
    wrapper = vars(_ctypes.CFuncPtr)["__call__"]
    if (
        any(
            word(id(t) + LAYOUT["tp_basicsize"]).value != t.__basicsize__
            or word(id(t) + LAYOUT["tp_flags"]).value != t.__flags__
            for t in types
        )
        or word(id(wrapper) + LAYOUT["d_wrapped"]).value
        != word(id(_ctypes.CFuncPtr) + LAYOUT["tp_call"]).value
    ):
        return False

    counts = [vars(_ctypes)[name] for name in ("Py_INCREF", "Py_DECREF")]
    if not _check_c_sides(ctypes, counts):
        return False
    _seal_c_sides(ctypes, counts, SEALED)  # the same objects come back if _ctypes is loaded again
    address = _refusal(ctypes, SEALED)  # (both made before the types are sealed)
    for cls in types:
        word(id(cls) + LAYOUT["tp_new"]).value = address
        if issubclass(cls, _ctypes.CFuncPtr):
            word(id(cls) + LAYOUT["tp_call"]).value = address
    word(id(wrapper) + LAYOUT["d_wrapped"]).value = address
    return True
