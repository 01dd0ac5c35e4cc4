"""The audit child's evidence that the audited code cannot take back: a PEP 578 audit hook and
kernels at torch's dispatcher, both installed by ``install`` before the first line of a
submission runs.

``fd`` is the write end of a pipe whose read end the grader's side holds (``evidence`` reads
it). A line written there has left the process: code that runs later can add lines, never
take one back. The lines:

    op NAME WHERE           a recorded torch operator ran, on whatever thread: its kernel is the
                            dispatcher's own for the CPU and every other backend that has one, so
                            no mode, guard or thread of the submission's runs it without this line
                            (WHERE: the cell and line that called it, "-" on a native thread);
                            NAME "python::F" for a Python function ``mark_python`` prefixed
    escape WHAT WHERE       a route out of Python's reach was tried, and refused: ctypes or cffi
                            (an import however its name was computed, a library, a symbol, a
                            pointer; any ctypes object made or foreign function called: sealed),
                            a route to raw memory (``memory``: numpy's array interfaces, torch's
                            raw pointers, a sparse tensor), a native module from anywhere but
                            the installed packages, tracing or profiling, the collector's lists
                            of objects, another process or program, another audit hook,
                            /proc/*/mem, a function's code replaced, a code object made or
                            unmarshalled (a module imported after ``arm`` is compiled from source),
                            a subinterpreter
    begin GID N, end GID N  the child's marks around each call, and ``done`` its last line: audit
                            events (``MARK``) it raises through a reference taken before any cell ran

Nothing of this can be reached, or changed, from Python once installed. The hook and the kernels
are held by the interpreter and the dispatcher alone (the collector's lists, the one way from
Python to them, are refused); what they hold is immutable (numbers, strings, frozen sets, the
interpreter's own functions), so that a frame of theirs that code sees (a signal handler's) gives
nothing to change; they read no module's globals and no builtin by name. A write that fails, or
finds the pipe replaced, ends the process at once: the missing ``done`` is then the evidence.
"""

import builtins
import os
import signal
import sys

from . import memory

MARK = "course.audit.mark"  # sys.audit(MARK, "begin"|"end"|"done", gid, index)
OP = "course.audit.op"  # sys.audit(OP, name): raised by the kernels, written by the hook
NATIVE = frozenset({"ctypes", "_ctypes", "cffi", "_cffi_backend"})
# CPython's own test modules: buffers, memory and interpreters on request (_testcapi's
# pymem_buffer_overflow, _testbuffer's strides, a subinterpreter without this hook)
TEST_MODULES = frozenset(
    {
        "_ctypes_test",
        "_testbuffer",
        "_testcapi",
        "_testclinic",
        "_testimportmultiple",
        "_testinternalcapi",
        "_testmultiphase",
        "_testsinglephase",
        "_xxinterpchannels",
        "_xxsubinterpreters",
        "_xxtestfuzz",
    }
)
ESCAPES = {
    "sys.settrace": "tracing",
    "sys.setprofile": "profiling",
    "gc.get_objects": "gc.get_objects",
    "gc.get_referrers": "gc.get_referrers",
    "gc.get_referents": "gc.get_referents",
    "os.fork": "os.fork",
    "os.forkpty": "os.forkpty",
    "os.posix_spawn": "os.posix_spawn",
    "os.spawn": "os.spawn",
    "os.exec": "os.exec",
    "os.system": "os.system",
    "subprocess.Popen": "subprocess",
    "pty.spawn": "pty.spawn",
    "sys.addaudithook": "an audit hook",
    "code.__new__": "a code object made",  # bytecode of one's own reads and writes past a frame
    "marshal.loads": "marshal.loads",  # (a code object too)
    "marshal.load": "marshal.load",
    "cpython.PyInterpreterState_New": "a subinterpreter",  # its code runs without this hook
}
BACKENDS = ("CPU", "SparseCPU", "SparseCsrCPU", "MkldnnCPU", "QuantizedCPU", "NestedTensorCPU")


def arm(fd, names=None):
    """Before the first cell: the audit event that marks the child's calls (``sys.audit``, for
    the child to keep), every hook installed on ``fd`` (recording the operators ``names``, by
    default ``forbidden.recorded_names``), the routes to raw memory closed (``memory``); ctypes
    and cffi forgotten by the import system (an import by any name then raises an event). ``fd``
    None: nothing recorded (a child run in-process by the tests' runner), and a mark that does
    nothing."""
    if fd is None:
        return lambda *args: None
    from .forbidden import recorded_ops

    ops = recorded_ops(names)  # torch imported (it makes ctypes types as it loads), then ctypes sealed
    no_new_programs()  # (no_new_privs: Landlock needs it)
    memory.no_proc_writes()
    memory.seal_numpy()  # each uses ctypes: before its seal
    memory.seal_torch()
    memory.seal_ctypes()
    mark_python()
    install(fd, ops)  # (torch imports ctypes: forgotten after)
    memory.refuse_kernels()  # after the recorded operators': a refused one is an escape
    for name in [n for n in sys.modules if n.split(".")[0] in NATIVE]:
        del sys.modules[name]
    sys.implementation.cache_tag = None  # a module imported now is compiled from its source: no marshal
    return sys.audit


# execve and execveat by architecture: (AUDIT_ARCH_*, numbers)
EXEC_CALLS = {"x86_64": (0xC000003E, 59, 322), "aarch64": (0xC00000B7, 221, 281)}


def no_new_programs() -> bool:
    """A seccomp filter on this process and every thread and process it starts: execve and
    execveat fail (EPERM). No audit event sees a program started through ``_posixsubprocess``,
    and a new program would run without this record. False where the machine has no filter
    for it (another architecture, no seccomp)."""
    import ctypes
    import platform

    arch = EXEC_CALLS.get(platform.machine())
    if arch is None:
        return False

    class Instruction(ctypes.Structure):
        _fields_ = [
            ("code", ctypes.c_ushort),
            ("jt", ctypes.c_ubyte),
            ("jf", ctypes.c_ubyte),
            ("k", ctypes.c_uint),
        ]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Instruction))]

    load, jump_equal, ret = 0x20, 0x15, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_RET|K
    allow, refuse = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EPERM
    code = [
        (load, 0, 0, 4),
        (jump_equal, 0, 4, arch[0]),
        (load, 0, 0, 0),
        (jump_equal, 1, 0, arch[1]),
        (jump_equal, 0, 1, arch[2]),
        (ret, 0, 0, refuse),
        (ret, 0, 0, allow),
    ]
    instructions = (Instruction * len(code))(*[Instruction(*c) for c in code])
    program = Program(len(code), instructions)
    prctl = memory.libc().prctl
    if prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        return False
    return prctl(22, 2, ctypes.byref(program), 0, 0) == 0  # PR_SET_SECCOMP, MODE_FILTER


def mark_python() -> None:
    """Before the hook: each Python function of ``derive.PYTHON`` gets code that first raises
    ``OP`` ("python::NAME") with ``sys.audit`` itself as a constant of the code (no name that
    code could rebind), compiled from its own source. Its code object is replaced in place, so
    every reference to the function runs it; replacing it again is an escape (the hook)."""
    import ast
    import inspect
    import pkgutil
    import textwrap
    import types
    import warnings

    from .derive import PYTHON

    stand_in = "course.audit.stand-in"
    for name, dotted in PYTHON.items():
        function = pkgutil.resolve_name(dotted)
        lines, first = inspect.getsourcelines(function)
        tree = ast.parse(textwrap.dedent("".join(lines)))
        body = tree.body[0].body
        call = ast.parse(f"{stand_in!r}({OP!r}, 'python::{name}')").body[0]
        body.insert(0, ast.copy_location(call, body[0]))
        ast.increment_lineno(tree, first - 1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "'str' object is not callable": it will be
            module = compile(tree, function.__code__.co_filename, "exec")
        code = next(
            c for c in module.co_consts if isinstance(c, types.CodeType) and c.co_name == function.__name__
        )
        function.__code__ = code.replace(
            co_consts=tuple(sys.audit if c == stand_in else c for c in code.co_consts)
        )


def install(fd: int, ops: dict) -> None:
    """Arm this process for good: every recorded operator (``ops``: {"ns::op.overload": the
    function that computes it, or None to refuse it}) and every escape writes a line to ``fd``.
    Nothing is returned and nothing is left where Python could reach it."""
    _hook_for(fd)
    if ops:
        _register(ops, sys.audit)


def _hook_for(fd: int) -> None:
    write, fstat, kill, getpid, getframe = os.write, os.fstat, os.kill, os.getpid, sys._getframe
    is_str, is_int, length, kill_signal = str, int, builtins.len, signal.SIGKILL
    type_of, error = builtins.type, PermissionError
    is_bytes, decode, stat_of, listdir = bytes, bytes.decode, os.stat, os.listdir
    proc = stat_of("/proc").st_dev if os.path.isdir("/proc") else None  # a file under it: /proc/self/mem
    native, tests, escapes = NATIVE, TEST_MODULES, tuple(ESCAPES.items())
    mark, op_event, raw = MARK, OP, memory.RAW
    stat = fstat(fd)
    pipe = (stat.st_dev, stat.st_ino)
    prefixes = (sys.prefix, sys.base_prefix, sys.exec_prefix)  # the installed packages, as named and as real
    trusted = tuple(
        sorted({os.path.join(f(p), "") for p in prefixes for f in (os.path.abspath, os.path.realpath)})
    )
    python_source = (".py", ".pyc")

    def hook(event, args):  # one function, no nested one: its frame shows nothing to change
        line = what = ran = ""
        if event == op_event:
            if length(args) == 1 and type_of(args[0]) is is_str:
                ran = args[0]
        elif event == mark:
            if (
                length(args) == 3
                and type_of(args[0]) is is_str
                and type_of(args[1]) is is_str
                and type_of(args[2]) is is_int
            ):
                line = "done" if args[0] == "done" else f"{args[0]} {args[1]} {args[2]}"
        elif event == "import" and length(args) > 1 and type_of(args[0]) is is_str:
            if args[0].split(".")[0] in native or args[0] in tests:
                what = "import:" + args[0]
            elif (
                type_of(args[1]) is is_str
                and not args[1].endswith(python_source)
                and not args[1].startswith(trusted)
            ):
                what = "native-module:" + args[1]
        elif event.startswith(("ctypes.", "cffi", raw)):
            what = event
        elif event == "object.__setattr__" and length(args) > 1 and args[1] == "__code__":
            what = "a function's code replaced"
        elif event == "open" and length(args) > 2:  # (path, mode, flags): what a name hides, stat sees
            path = decode(args[0], "utf-8", "replace") if type_of(args[0]) is is_bytes else args[0]
            if type_of(path) is is_str and path.startswith("/proc/") and path.endswith(("/mem", "/pagemap")):
                what = "open:" + path
            elif type_of(args[2]) is is_int and args[2] & 3 and type_of(path) is is_str:  # for writing
                # relative: to the working folder, or to any folder it holds open (``dir_fd``,
                # which the event leaves out)
                try:
                    held = [] if path.startswith("/") else [is_int(fd) for fd in listdir("/proc/self/fd")]
                except OSError:
                    held = []
                for folder in (None, *held):
                    try:
                        if stat_of(args[0], dir_fd=folder).st_dev == proc:
                            what = "open-for-writing:" + path
                            break
                    except OSError:
                        pass
        else:
            for name, said in escapes:
                if event == name:
                    what = said
        if what or ran:  # where: the innermost frame of a submission's cell
            place, frame = "-", getframe(1)
            while frame is not None:
                file = frame.f_code.co_filename
                if type_of(file) is is_str and file.startswith("<cell "):
                    place = f"{file[1:-1]}, line {frame.f_lineno}"
                    break
                frame = frame.f_back
            place = place.replace(" ", "+")  # one word each
            line = f"escape {what.replace(' ', '+')} {place}" if what else f"op {ran} {place}"
        if not line:
            return
        try:
            now = fstat(fd)
            if (now.st_dev, now.st_ino) != pipe:
                raise OSError("the record's pipe was replaced")
            data = (line.replace("\n", " ")[:300] + "\n").encode("utf-8", "replace")
            while data:
                data = data[write(fd, data) :]
        except OSError:  # a record that cannot be written ends the process
            kill(getpid(), kill_signal)
        if what:
            raise error(f"{what} is refused here")

    sys.addaudithook(hook)


def _register(ops: dict, audit) -> None:
    """A kernel for every backend of every recorded operator: it raises ``OP`` (the hook writes
    the line), then computes the operator through its decomposition (on other backends than
    the CPU, or with none given: refuses it). The library handles live in the kernels' own
    attributes, out of every frame's sight, as long as the dispatcher holds the kernels."""
    import warnings

    import torch

    handles, kernels = {}, []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "overriding a previously registered kernel"
        for name, compute in ops.items():
            ns, rest = name.split("::", 1)
            for key in BACKENDS:
                if not torch._C._dispatch_has_kernel_for_dispatch_key(name, key) and not (
                    key == "CPU" and compute is not None
                ):
                    continue
                lib = handles.get((ns, key))
                if lib is None:
                    lib = handles[(ns, key)] = torch._C._dispatch_library("IMPL", ns, key, "", 0)
                kernel = _kernel(name, compute if key == "CPU" else None, audit)
                lib.impl(rest, key, kernel, False)
                kernels.append(kernel)
    held = tuple(handles.values())
    for kernel in kernels:
        kernel.held = held


def _kernel(name: str, compute, audit):
    event, refused = OP, f"{name} is refused here"

    def kernel(*args, **kwargs):
        audit(event, name)
        if compute is None:
            raise RuntimeError(refused)
        return compute(*args, **kwargs)

    return kernel
