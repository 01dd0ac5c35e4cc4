"""Over 500 lines: one class, the sandbox's server: each request it answers, each child it isolates.

The sandbox server: one process inside bubblewrap that forks every grading kernel and every
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
    {"op": "audit", "token": t, "cpu": s}  -> {"pid": n}   the audit's entry point on the job
    {"op": "collect", "token": t}      -> {"files": {name: base64}, "record": base64}  the audit's
                                          out-* files, and its record as read from its pipe

The audit is the grader's, handed by name in SPEC_JSON's ``audit`` (``sandbox.warm.hand_audit``):
modules a warm server imports (``preload``) and functions it calls once (``warm_up``); in the
child, ``prepare()`` then ``main(FOLDER, RECORD_FD)``; the record's pipe, ``pipe()`` giving
(read end, write end), whose read end this server keeps and reads with ``drain(read end)``
(``.finish(timeout)`` gives the bytes, ``.fd`` is the end). This module names none of it.
    {"op": "poll", "pid": n}           -> {"returncode": n or null}
    {"op": "wait", "pid": n, "seconds": s} -> {"returncode": n or null}  once it ended, or after s
                                          seconds (at most WAIT_SECONDS)
    {"op": "signal", "pid": n, "signal": s} -> {"ok": true}  to the child's process group
    {"op": "reset"}                    -> {"ok": true}  or {"ok": false, "why": s}
"""

import base64
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

from course_grading.sandbox import children, isolate
from course_grading.sandbox.preload import (
    Refuse,
    fix_paths,
    keep_freed_memory,
    named,
    package_folders,
    preload,
    trusted_imports,
)

ALLOWED_ENV = ("NBGRADER_EXECUTION",)  # what a kernel request may set in the kernel's environment
TOKEN = re.compile(r"[0-9a-f]{32}")
IPC_NAME = re.compile(r"[0-9a-f]{6}")
OUT_NAME = re.compile(r"out-[A-Za-z0-9_.-]{1,200}\.(json|npy)")
COLLECT_BYTES = 64 << 20
WAIT_SECONDS = 5  # the longest one "wait" request holds the server


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
        self.audit_entry = spec.get("audit") or None  # the audit's entry point, by name
        self.records: dict = {}  # an audit job's record, read from its pipe (the entry's drain)
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
            self.isolated, self.why = children.probe(
                self.jobs_root, lambda: self._isolate_child([], hide=self.secret_folders)
            )
            if self.isolated:
                isolate.enter_namespaces(network=False, ipc=False)
                isolate.tmpfs(self.jobs_root, 1, mode=0o755)
        import course_grading
        import course_utils

        if warm:
            preload(self.refuse, self.audit_entry)
            keep_freed_memory()
        self.snapshot = self._private_listing()
        secrets = sorted(
            m for m in sys.modules if any(m == n or m.startswith(n + ".") for n in self.refuse.names)
        )
        secrets += sorted(
            getattr(m, "__file__", "")
            for m in list(sys.modules.values())
            if any(children.under(getattr(m, "__file__", None) or "", f) for f in self.secret_folders)
        )
        return {
            "ready": True,
            "isolated": self.isolated,
            "why": self.why,
            "secrets": secrets,
            "packages": {
                "course_utils": package_folders(course_utils),
                "course_grading": package_folders(course_grading),
            },
            "seconds": round(time.monotonic() - started, 3),
        }

    def _private_listing(self) -> set:
        """Every path under this server's own private folders (the jobs and the grader's
        folders aside): a child never changes them, the reset checks it."""
        found, points = set(), set(children.mount_points())
        for root in self.private:
            for folder, dirs, files in os.walk(root):
                dirs[:] = [
                    d
                    for d in dirs
                    if os.path.join(folder, d) not in points
                    and not children.under(os.path.join(folder, d), self.base)
                ]
                found.update(os.path.join(folder, n) for n in (*dirs, *files))
                if len(found) > 50_000:
                    return found
        return found

    # ------------------------------------------------------------------ children

    def _isolate_child(self, keep: list, hide=()) -> None:
        """Fresh namespaces for this child (``children.fresh_namespaces``); ``keep``: (source,
        target, "ro" or "rw") folders to mount in the covered BASE."""
        children.fresh_namespaces(
            keep, hide, private=self.private, base=self.base, megabytes=self.megabytes, home=self.home
        )

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
                helper = children.ReadOnlyLater(
                    ipc
                )  # keeps the privilege to make the socket folder read-only
            self._seed_home()
            profile = children.ipython_profile(self.home, readonly=self.isolated)
            isolate.drop_privileges()
            isolate.set_dumpable(True)
            conn_file = os.path.join("/tmp", "kernel-connection.json")
            with open(conn_file, "w", encoding="utf-8") as fh:
                json.dump(connection, fh)
            os.environ.update(env)
            os.environ["IPYTHONDIR"] = os.path.dirname(profile)
            os.chdir(job)
            trusted_imports(self.refuse)
            from ipykernel.kernelapp import IPKernelApp

            self._quiet()  # before the kernel takes its own copies of stdout and stderr
            app = IPKernelApp.instance()
            app.initialize(
                ["-f", conn_file, *args, "--IPKernelApp.ignore_cwd=True", "--HistoryManager.enabled=False"]
            )
            children.wait_for_sockets(app)
            if helper is not None:
                helper.finish()
            sys.path.append(job)  # after the installed packages: building_blocks.py and the like
            self._student_code_next()
            app.start()

        return self.fork(run)

    def audit(self, token: str, cpu: int) -> int:
        job = self.jobs[token]
        entry = self.audit_entry
        if not entry:
            raise ValueError("this sandbox was handed no audit")
        drain = named(entry["drain"])
        read, write = named(entry["pipe"])()  # the record's pipe: its read end stays here

        def run():
            os.close(read)
            if self.isolated:
                self._isolate_child(self._keep_for(token, kernel=False), hide=self.secret_folders)
            isolate.drop_privileges()
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
            os.chdir(job)
            # imported here, the refusal of the secrets still in place
            prepare, main = named(entry["prepare"]), named(entry["main"])
            fix_paths()
            prepare()
            self._quiet()
            self._student_code_next()
            main(job, write)

        try:
            return self.fork(run)
        finally:
            os.close(write)
            self.records[token] = drain(read)

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
        return {
            "files": {name: base64.b64encode(data).decode("ascii") for name, data in found.items()},
            "record": base64.b64encode(record).decode("ascii"),
        }

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
            if any(
                children.under(m, self.jobs_root) and m != self.jobs_root for m in children.mount_points()
            ):
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
            return {
                "pid": self.kernel(
                    self._token(request),
                    [str(a) for a in request.get("args", [])],
                    dict(request["connection"]),
                    env,
                )
            }
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
