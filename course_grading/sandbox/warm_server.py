"""The sandbox server: one process inside bubblewrap that forks every grading kernel and every
audit process of a grader, each into fresh namespaces of its own.

    python -I -m course_grading.sandbox.warm_server FD SPEC_JSON

Starting a kernel costs about 2 s here before a notebook's first line runs (Python, IPython's
kernel, then torch, NumPy, matplotlib and the course's own modules). A *warm* server pays that
once: it imports all of it (the learner side only: ``course_grading.reference`` and
``course_grading.checks`` are refused, and anything that needs them is left out), then forks a
child for each kernel or audit. A *single-use* server (no preload) serves one job and ends.

Every child starts fresh by construction, before any student code runs (``isolate``):

* new user, mount, IPC and network namespaces (System V IPC, POSIX queues, abstract sockets
  and the loopback are its own; nothing it mounts reaches the server);
* new size-limited tmpfs on ``/tmp``, ``/var/tmp``, ``/dev/shm`` and ``$HOME`` (the Python
  environment that lived there mounted back read-only), an empty read-only IPython profile,
  its own session keyring;
* the grader's folder ``BASE`` covered by an empty read-only tmpfs, in which only its job's
  working folder (a size-limited tmpfs holding a copy of the job's files) and, for a kernel,
  its socket folder appear; a kernel's socket folder turns read-only once its sockets are
  bound (a helper does it: the kernel has dropped every capability before it starts);
* for an audit, the instructor's secret folders (reference, hidden checks) covered;
* no capability left, in any set, no_new_privs; then the kernel or the audit runs.

Where these namespaces cannot be made (the server probes it when it starts: ``isolated`` in
its first message) the grader does not reuse the server: every kernel and audit gets a
single-use server, fresh because its bubblewrap is.

FD is one end of a socket pair whose other end the grader holds (never on the filesystem;
each child closes it first). This process is PID 1 of the sandbox and not dumpable: nothing
in the sandbox can signal, stop or trace it. Requests and replies are JSON lines:

    (on start)                         -> {"ready": true, "isolated": b, "why": s, "packages": {...},
                                           "secrets": [...], "seconds": s}
    {"op": "job", "token": t, "ipc": i} -> {"path": p, "ipc": q}  the job's working folder,
                                          holding a copy of BASE/spool/t (the grader's files for
                                          it); a kernel's job has a new socket folder BASE/ipc/i
    {"op": "kernel", "token": t, "args": [...], "connection": {...}, "env": {...}}
                                       -> {"pid": n}   an IPython kernel on its folder's sockets
    {"op": "audit", "token": t, "cpu": s}  -> {"pid": n}   course_grading.audit.child on the job
    {"op": "collect", "token": t}      -> {"files": {name: base64}, "record": base64}  the audit's
                                          out-* files, and its record as read from its pipe
    {"op": "poll", "pid": n}           -> {"returncode": n or null}
    {"op": "wait", "pid": n, "seconds": s} -> {"returncode": n or null}  once it ended, or after s
                                          seconds (at most WAIT_SECONDS)
    {"op": "signal", "pid": n, "signal": s} -> {"ok": true}  to the child's process group
    {"op": "reset"}                    -> {"ok": true}  or {"ok": false, "why": s}
"""
import base64
import importlib
import json
import os
import random
import re
import resource
import select
import signal
import socket
import sys
import time
import traceback

from course_grading.sandbox import isolate

ALLOWED_ENV = ("NBGRADER_EXECUTION",)  # what a kernel request may set in the kernel's environment
PRELOAD = ("numpy", "torch", "torch.nn", "torch.nn.functional", "matplotlib", "matplotlib.pyplot",
           "matplotlib_inline.backend_inline", "ipywidgets", "IPython", "ipykernel.kernelapp",
           "ipykernel.ipkernel", "ipykernel.zmqshell", "ipykernel.debugger", "course_utils",
           "course_utils.toy_task", "course_utils.training", "course_utils.minilm",
           "course_grading.audit.child")
PACKAGES = ("course_utils.checks", "course_utils.plots", "course_utils.widgets")
TOKEN = re.compile(r"[0-9a-f]{32}")
IPC_NAME = re.compile(r"[0-9a-f]{6}")
OUT_NAME = re.compile(r"out-[A-Za-z0-9_.-]{1,200}\.(json|npy)")
COLLECT_BYTES = 64 << 20
SOCKET_SECONDS = 20  # for a kernel to bind its sockets
WAIT_SECONDS = 5  # the longest one "wait" request holds the server
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters
MMAP_BELOW_MB, TRIM_ABOVE_MB = 32, 64
PROFILE_DIRS = (("startup", 0o755), ("log", 0o755), ("security", 0o700), ("pid", 0o700))


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


def preload(refuse: Refuse) -> None:
    """Import what every kernel and audit would import, and load the GloVe vectors once."""
    import pkgutil

    for name in PRELOAD:
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
    _step(refuse, _audit_record)
    _step(refuse, _format_a_traceback)


def _audit_record() -> None:
    """The operators an audit records, looked up once (``audit.forbidden.recorded_ops``)."""
    from course_grading.audit.forbidden import recorded_ops
    recorded_ops()


def _keep_freed_memory() -> None:
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


def _decode_mount_path(text: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def mount_points() -> list[str]:
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as fh:
        for line in fh:
            found.append(_decode_mount_path(line.split()[4]))
    return found


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


class Server:
    def __init__(self, sock: socket.socket, spec: dict):
        self.sock = sock
        self.reader = sock.makefile("rb")
        self.base = spec["base"]
        self.spool = os.path.join(self.base, "spool")
        self.ipc = os.path.join(self.base, "ipc")
        self.jobs_root = os.path.join(self.base, "jobs")
        self.single = bool(spec.get("single"))
        self.megabytes = int(spec["tmpfs_mb"])
        self.home = spec["home"]
        self.private = [p for p in spec["private"] if os.path.isdir(p)]
        self.secret_folders = list(spec.get("secret_folders", []))
        self.refuse = Refuse(spec.get("secret_modules", []))
        self.isolated, self.why = False, ""
        self.jobs: dict[str, str] = {}
        self.ipcs: dict[str, str] = {}  # a kernel job's socket folder
        self.records: dict = {}  # an audit job's record, read from its pipe (audit.channel.Drain)
        self.used = False
        self.me = os.getpid()
        self.ended: dict[int, int] = {}  # children reaped before anyone asked
        self.snapshot: set = set()
        self.log: int | None = None

    # ------------------------------------------------------------------ start

    def start(self, isolate_children: bool, warm: bool) -> dict:
        started = time.monotonic()
        sys.meta_path.insert(0, self.refuse)
        if isolate_children:
            self.isolated, self.why = self._probe()
            if self.isolated:
                isolate.enter_namespaces(network=False, ipc=False)
                isolate.tmpfs(self.jobs_root, 1, mode=0o755)
        import course_grading
        import course_utils
        if warm:
            preload(self.refuse)
            _keep_freed_memory()
        self.snapshot = self._private_listing()
        secrets = sorted(m for m in sys.modules if any(m == n or m.startswith(n + ".")
                                                       for n in self.refuse.names))
        secrets += sorted(getattr(m, "__file__", "") for m in list(sys.modules.values())
                          if any(_under(getattr(m, "__file__", None) or "", f) for f in self.secret_folders))
        return {"ready": True, "isolated": self.isolated, "why": self.why, "secrets": secrets,
                "packages": {"course_utils": package_folders(course_utils),
                             "course_grading": package_folders(course_grading)},
                "seconds": round(time.monotonic() - started, 3)}

    def _probe(self) -> tuple[bool, str]:
        """Whether a child can get namespaces of its own here: a throw-away child tries every
        step (this server's namespace, then a child's, then dropping privileges)."""
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            try:
                isolate.enter_namespaces(network=False, ipc=False)
                isolate.tmpfs(self.jobs_root, 1, mode=0o755)
                inner = os.fork()
                if inner == 0:
                    try:
                        self._isolate_child([], hide=self.secret_folders)
                        isolate.drop_privileges()
                        os._exit(0)
                    except BaseException as exc:  # noqa: BLE001 - whatever failed, the parent reads it from the pipe
                        os.write(write, f"{type(exc).__name__}: {exc}".encode()[:500])
                        os._exit(1)
                _, status = os.waitpid(inner, 0)
                os._exit(0 if status == 0 else 1)
            except BaseException as exc:  # noqa: BLE001 - whatever failed, the parent reads it from the pipe
                os.write(write, f"{type(exc).__name__}: {exc}".encode()[:500])
                os._exit(1)
        os.close(write)
        _, status = os.waitpid(pid, 0)
        with os.fdopen(read, "rb") as fh:
            why = fh.read().decode(errors="replace")
        return status == 0, why or ("" if status == 0 else f"the probe ended with status {status}")

    def _private_listing(self) -> set:
        """Every path under this server's own private folders (the jobs and the grader's
        folders aside): a child never changes them, the reset checks it."""
        found, points = set(), set(mount_points())
        for root in self.private:
            for folder, dirs, files in os.walk(root):
                dirs[:] = [d for d in dirs if os.path.join(folder, d) not in points
                           and not _under(os.path.join(folder, d), self.base)]
                found.update(os.path.join(folder, n) for n in (*dirs, *files))
                if len(found) > 50_000:
                    return found
        return found

    # ------------------------------------------------------------------ children

    def _isolate_child(self, keep: list, hide=()) -> None:
        """Fresh namespaces for this (forked, single-threaded) child; see the module's doc.
        ``keep``: (source, target, "ro" or "rw") folders to mount in the covered BASE."""
        covered = list(self.private)
        points = mount_points()
        carried = [m for m in points
                   if any(_under(m, c) and m != c for c in covered) and not _under(m, self.base)]
        carried = [m for m in dict.fromkeys(carried)
                   if not any(_under(m, o) and m != o for o in carried)]
        isolate.enter_namespaces()
        stage_root = "/dev/shm"
        isolate.tmpfs(stage_root, self.megabytes, mode=0o1777)  # the staging area, then /dev/shm
        stage = os.path.join(stage_root, ".stage")
        os.mkdir(stage, 0o700)
        moves = []
        for index, (source, target, mode) in enumerate([*((m, m, "ro") for m in carried), *keep]):
            staged = os.path.join(stage, str(index))
            os.mkdir(staged)
            isolate.mount(source, staged, None, isolate.MS_BIND | isolate.MS_REC)
            moves.append((staged, target, mode))
        for folder in covered:
            if folder != stage_root:
                isolate.tmpfs(folder, self.megabytes, mode=0o700 if folder == self.home else 0o1777)
        os.makedirs(self.base, exist_ok=True)
        isolate.tmpfs(self.base, 1, mode=0o755)
        for staged, target, mode in moves:
            os.makedirs(target, exist_ok=True)
            isolate.mount(staged, target, None, isolate.MS_BIND | isolate.MS_REC)
            if mode == "ro":
                isolate.remount_readonly(target)
        isolate.remount_readonly(self.base)
        for staged, _, _ in moves:
            isolate.unmount(staged)
            os.rmdir(staged)
        os.rmdir(stage)
        for folder in hide:
            if os.path.isdir(folder):
                isolate.tmpfs(folder, 0.0625, mode=0o555, readonly=True)
        isolate.loopback_up()
        isolate.new_session_keyring()

    def _seed_home(self) -> None:
        """The grader's seed files (matplotlib's font cache) copied into the fresh $HOME."""
        seed = os.path.join(self.spool, "seed")
        if os.path.isdir(seed) and os.path.isdir(self.home):
            source, target = isolate.open_folder(seed), isolate.open_folder(self.home)
            try:
                isolate.copy_tree(source, target, max_bytes=16 << 20, skip=())
            except FileExistsError:
                pass
            finally:
                os.close(source)
                os.close(target)

    def _keep_for(self, token: str, kernel: bool) -> list:
        job = self.jobs[token]
        keep = [(job, job, "rw"), (os.path.join(self.spool, "seed"), os.path.join(self.spool, "seed"), "ro")]
        keep = [k for k in keep if os.path.isdir(k[0])]
        if kernel:
            keep.append((self.ipcs[token], self.ipcs[token], "rw"))
        return keep

    def fork(self, run) -> int:
        pid = os.fork()
        if pid:
            return pid
        code = 70
        self.log = os.dup(2)  # the server's log, for what goes wrong before student code runs
        try:  # the child: nothing of the server's reaches the code it runs
            self.reader.close()
            self.sock.close()
            for drain in self.records.values():  # other audits' records: never read by a child
                os.close(drain.fd)
            os.setsid()
            devnull = os.open(os.devnull, os.O_RDWR)
            os.dup2(devnull, 0)
            os.close(devnull)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            random.seed()
            try:
                import numpy as np
                np.random.seed()
            except Exception:  # noqa: BLE001 - without NumPy there is nothing to reseed
                pass
            run()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 0
        except BaseException:  # noqa: BLE001 - a forked child ends here, whatever its run raised
            if self.log is not None:
                try:
                    os.write(self.log, traceback.format_exc()[-4000:].encode(errors="replace"))
                except OSError:
                    pass
            code = 70
        os._exit(code)

    def _quiet(self) -> None:
        """The child's own stdout and stderr go nowhere (a kernel's output travels on its
        sockets): nothing it prints reaches the server's log on the grader's disk."""
        devnull = os.open(os.devnull, os.O_WRONLY)
        for fd in (1, 2):
            os.dup2(devnull, fd)
        os.close(devnull)

    def _student_code_next(self) -> None:
        """The last step before student code runs: the server's log closed."""
        if self.log is not None:
            os.close(self.log)
            self.log = None

    def kernel(self, token: str, args: list, connection: dict, env: dict) -> int:
        job = self.jobs[token]
        ipc = self.ipcs.get(token)
        if ipc is None or not os.path.isdir(ipc):
            raise ValueError("this job has no socket folder")
        if connection.get("ip") != os.path.join(ipc, "k") or connection.get("transport") != "ipc":
            raise ValueError("the kernel's sockets must be in its own socket folder")

        def run():
            helper = None
            if self.isolated:
                self._isolate_child(self._keep_for(token, kernel=True))
                helper = _Helper(ipc)  # keeps the privilege to make the socket folder read-only
            self._seed_home()
            profile = _ipython_profile(self.home, readonly=self.isolated)
            isolate.drop_privileges()
            isolate.set_dumpable(True)
            conn_file = os.path.join("/tmp", "kernel-connection.json")
            with open(conn_file, "w", encoding="utf-8") as fh:
                json.dump(connection, fh)
            os.environ.update(env)
            os.environ["IPYTHONDIR"] = os.path.dirname(profile)
            os.chdir(job)
            _trusted_imports(self.refuse)
            from ipykernel.kernelapp import IPKernelApp
            self._quiet()  # before the kernel takes its own copies of stdout and stderr
            app = IPKernelApp.instance()
            app.initialize(["-f", conn_file, *args, "--IPKernelApp.ignore_cwd=True",
                            "--HistoryManager.enabled=False"])
            _wait_for_sockets(app)
            if helper is not None:
                helper.finish()
            sys.path.append(job)  # after the installed packages: building_blocks.py and the like
            self._student_code_next()
            app.start()
        return self.fork(run)

    def audit(self, token: str, cpu: int) -> int:
        job = self.jobs[token]
        from course_grading.audit import channel  # the record's pipe: its read end stays here
        read, write = channel.open_pipe()

        def run():
            os.close(read)
            if self.isolated:
                self._isolate_child(self._keep_for(token, kernel=False), hide=self.secret_folders)
            isolate.drop_privileges()
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
            os.chdir(job)
            from course_grading.audit import child  # the refusal of the secrets stays in place
            _fix_paths()
            child.stand_in_unaudited()
            self._quiet()
            self._student_code_next()
            child.main(job, write)
        try:
            return self.fork(run)
        finally:
            os.close(write)
            self.records[token] = channel.Drain(read)

    # ------------------------------------------------------------------ jobs

    def job(self, token: str, ipc: str | None) -> dict:
        if not TOKEN.fullmatch(token) or token in self.jobs:
            raise ValueError("bad job token")
        if ipc is not None and not IPC_NAME.fullmatch(ipc):
            raise ValueError("bad socket folder name")
        if self.single:
            if self.used:
                raise ValueError("a single-use sandbox serves one job")
            path = os.path.join(self.base, "work")
        elif self.isolated:
            path = os.path.join(self.jobs_root, token)
            os.mkdir(path, 0o700)
            isolate.tmpfs(path, self.megabytes, mode=0o700)
        else:
            raise ValueError("this sandbox cannot give a job a folder of its own")
        self.used = True
        self.jobs[token] = path
        answer = {"path": path}
        if ipc is not None:  # a kernel's socket folder, new
            self.ipcs[token] = answer["ipc"] = os.path.join(self.ipc, ipc)
            os.mkdir(self.ipcs[token], 0o700)
        source = os.path.join(self.spool, token)
        if os.path.isdir(source):
            from_fd, to_fd = isolate.open_folder(source), isolate.open_folder(path)
            try:
                isolate.copy_tree(from_fd, to_fd, max_bytes=self.megabytes << 20)
            finally:
                os.close(from_fd)
                os.close(to_fd)
        return answer

    def collect(self, token: str) -> dict:
        folder = isolate.open_folder(self.jobs[token])
        try:
            found = isolate.read_regular_files(folder, OUT_NAME.fullmatch, max_bytes=COLLECT_BYTES)
        finally:
            os.close(folder)
        drain = self.records.pop(token, None)
        record = drain.finish() if drain is not None else b""
        return {"files": {name: base64.b64encode(data).decode("ascii") for name, data in found.items()},
                "record": base64.b64encode(record).decode("ascii")}

    def poll(self, pid: int):
        if pid in self.ended:
            return self.ended[pid]
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return -1
        if not done:
            return None
        self.ended[pid] = os.waitstatus_to_exitcode(status)
        return self.ended[pid]

    def wait(self, pid: int, seconds: float):
        """``poll`` once ``pid`` has ended or ``seconds`` (at most WAIT_SECONDS) have passed:
        the grader hears of the end at once, instead of at its next look."""
        deadline = time.monotonic() + (min(seconds, WAIT_SECONDS) if seconds > 0 else 0.0)
        try:
            handle = os.pidfd_open(pid)
        except OSError:  # ended and reaped, not ours, or no pidfd here
            handle = None
        try:
            while True:
                code = self.poll(pid)
                left = deadline - time.monotonic()
                if code is not None or left <= 0:
                    return code
                if handle is not None:
                    select.select([handle], [], [], left)
                else:
                    time.sleep(min(left, 0.005))
        finally:
            if handle is not None:
                os.close(handle)

    def signal(self, pid: int, signum: int) -> None:
        if pid <= 1:
            return
        for send in (os.killpg, os.kill):
            try:
                send(pid, signum)
                return
            except OSError:
                continue

    # ------------------------------------------------------------------ reset

    def others(self) -> list[int]:
        return [int(e) for e in os.listdir("/proc") if e.isdigit() and int(e) not in (1, self.me)]

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if not pid:
                return
            self.ended[pid] = os.waitstatus_to_exitcode(status)

    def reset(self) -> dict:
        """Kill every other process, unmount every job; ok only when that is proven."""
        deadline = time.monotonic() + 5
        while True:
            left = self.others()
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            self.reap()
            if not left:
                break
            if time.monotonic() > deadline:
                return {"ok": False, "why": f"{len(left)} processes survived the reset"}
            time.sleep(0.01)
        self.ended.clear()
        for path in list(self.jobs.values()):
            if self.isolated and not self.single:
                try:
                    isolate.unmount(path)
                    os.rmdir(path)
                except OSError:
                    pass
        self.jobs.clear()
        self.ipcs.clear()
        for drain in self.records.values():
            drain.finish(0)
        self.records.clear()
        why = self._unclean()
        return {"ok": not why, "why": why} if why else {"ok": True}

    def _unclean(self) -> str:
        if self.others():
            return "processes left"
        if self.isolated and not self.single:
            if any(_under(m, self.jobs_root) and m != self.jobs_root for m in mount_points()):
                return "a job's folder is still mounted"
            if os.listdir(self.jobs_root):
                return "a job's folder is left"
        if self._private_listing() != self.snapshot:
            return "the sandbox's own private folders changed"
        return ""

    # ------------------------------------------------------------------ protocol

    def reply(self, message: dict) -> None:
        self.sock.sendall(json.dumps(message).encode() + b"\n")

    def handle(self, request: dict) -> dict:
        op = request.get("op")
        if op == "job":
            ipc = request.get("ipc")
            return self.job(str(request["token"]), None if ipc is None else str(ipc))
        if op == "kernel":
            env = {str(k): str(v) for k, v in (request.get("env") or {}).items() if k in ALLOWED_ENV}
            return {"pid": self.kernel(self._token(request), [str(a) for a in request.get("args", [])],
                                       dict(request["connection"]), env)}
        if op == "audit":
            return {"pid": self.audit(self._token(request), int(request.get("cpu", 40)))}
        if op == "collect":
            return self.collect(self._token(request))
        if op == "poll":
            return {"returncode": self.poll(int(request["pid"]))}
        if op == "wait":
            return {"returncode": self.wait(int(request["pid"]), float(request.get("seconds", 0)))}
        if op == "signal":
            self.signal(int(request["pid"]), int(request["signal"]))
            return {"ok": True}
        if op == "reset":
            return self.reset()
        return {"error": f"unknown op {op!r}"}

    def _token(self, request: dict) -> str:
        token = str(request.get("token"))
        if token not in self.jobs:
            raise ValueError("no such job")
        return token

    def serve(self) -> None:
        for line in self.reader:
            try:
                answer = self.handle(json.loads(line))
            except Exception as exc:  # noqa: BLE001 - a bad request gets an answer, not a crash
                answer = {"error": f"{type(exc).__name__}: {exc}"}
            self.reply(answer)


class _Helper:
    """A process that keeps the child's privileges (in the child's own namespace) for one
    step after the child has dropped them: the socket folder made read-only once the kernel
    has bound its sockets. Not dumpable, it cannot be traced by the kernel."""

    def __init__(self, folder: str):
        self.go_r, self.go_w = os.pipe()
        self.done_r, self.done_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            os.close(self.go_w)
            os.close(self.done_r)
            code = 1
            try:
                if os.read(self.go_r, 1) == b"1":
                    isolate.remount_readonly(folder)
                    os.write(self.done_w, b"1")
                    code = 0
            finally:
                os._exit(code)
        os.close(self.go_r)
        os.close(self.done_w)

    def finish(self) -> None:
        os.write(self.go_w, b"1")
        ready, _, _ = select.select([self.done_r], [], [], SOCKET_SECONDS)
        if not ready or os.read(self.done_r, 1) != b"1":
            raise isolate.IsolationError(1, "the socket folder could not be made read-only")
        os.waitpid(self.pid, 0)
        os.close(self.go_w)
        os.close(self.done_r)


def _ipython_profile(home: str, readonly: bool) -> str:
    """An empty IPython profile in $HOME (read-only when it can be): no startup file, no
    configuration, wherever the kernel looks. Returns its folder."""
    profile = os.path.join(home, ".ipython", "profile_default")
    for name, mode in PROFILE_DIRS:
        os.makedirs(os.path.join(profile, name), mode=mode, exist_ok=True)
        os.chmod(os.path.join(profile, name), mode)
    if readonly:
        isolate.mount(profile, profile, None, isolate.MS_BIND | isolate.MS_REC)
        isolate.remount_readonly(profile)
    return profile


def package_folders(module) -> list[str]:
    """The folders a package is imported from (a namespace package may have several)."""
    if getattr(module, "__file__", None):
        return [os.path.dirname(os.path.realpath(module.__file__))]
    return sorted({os.path.realpath(p) for p in getattr(module, "__path__", []) if os.path.isdir(p)})


def _trusted_imports(refuse: Refuse) -> None:
    """A kernel may import the hidden checks (and the reference they use): the refusal goes.
    The course's packages are imported now, before the kernel's own folder is on sys.path, and
    their search paths fixed (a namespace package would take a folder of the same name from
    any later entry of sys.path)."""
    sys.meta_path[:] = [f for f in sys.meta_path if f is not refuse]
    _fix_paths()
    sys.path[:] = [p for p in sys.path if p and os.path.isabs(p)]


def _fix_paths() -> None:
    import course_grading
    import course_utils
    for package in (course_grading, course_utils):
        package.__path__ = package_folders(package)


def _wait_for_sockets(app) -> None:
    ports = (app.shell_port, app.iopub_port, app.stdin_port, app.control_port, app.hb_port)
    paths = [f"{app.ip}-{port}" for port in ports]
    deadline = time.monotonic() + SOCKET_SECONDS
    while not all(os.path.exists(p) for p in paths):
        if time.monotonic() > deadline:
            raise isolate.IsolationError(1, "the kernel did not bind its sockets")
        time.sleep(0.002)


def main(argv: list[str]) -> None:
    isolate.set_dumpable(False)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # PID 1: no signal from inside reaches it
    sock = socket.socket(fileno=int(argv[1]))
    spec = json.loads(argv[2])
    server = Server(sock, spec)
    server.reply(server.start(bool(spec.get("isolate")), bool(spec.get("preload"))))
    server.serve()


if __name__ == "__main__":
    main(sys.argv)
