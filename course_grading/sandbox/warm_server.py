"""The warm sandbox: one long-lived process per grader, inside bubblewrap, that forks every
grading kernel and every audit process of that grader.

    python -I -m course_grading.sandbox.warm_server FD KEEP [KEEP ...]

Starting a kernel costs about 2 s here before a notebook's first line runs (Python, IPython's
kernel, then torch, NumPy, matplotlib and the course's own modules). This process pays that
once: it imports all of it, then forks a fresh child for each kernel or audit, so that the
child starts with everything loaded and nothing of any student in it.

FD is one end of a socket pair whose other end the grader holds (it is never on the
filesystem, and every child closes it before anything else runs); KEEP are the folders bound
into the sandbox (the grader empties them itself). Requests and replies are JSON lines:

    (on start)                                  -> {"ready": true, "seconds": s}
    {"op": "kernel", "argv": [...], "cwd": p, "env": {...}}
                                                -> {"pid": n}   an IPython kernel (ipykernel's argv)
    {"op": "audit", "folder": p, "cpu": s}      -> {"pid": n}   course_grading.audit.child on p
    {"op": "poll", "pid": n}                    -> {"returncode": n or null}
    {"op": "signal", "pid": n, "signal": s}     -> {"ok": true}  to the child's process group
    {"op": "reset"}                             -> {"ok": true}  or {"ok": false, "left": n}

Only one submission is in the sandbox at a time: the grader resets before every launch, which
kills every other process in the sandbox's PID namespace (this process is their reaper) and
empties its private /tmp, /var/tmp and /dev/shm. This process is not dumpable: the children
cannot trace it or take its socket.
"""
import ctypes
import json
import os
import random
import resource
import shutil
import signal
import socket
import sys
import time

PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
ALLOWED_ENV = ("NBGRADER_EXECUTION",)  # what a kernel request may set in the kernel's environment
PRIVATE = ("/tmp", "/var/tmp", "/dev/shm", os.path.expanduser("~"))  # tmpfs of this sandbox
PRELOAD = ("numpy", "torch", "torch.nn", "torch.nn.functional", "matplotlib", "matplotlib.pyplot",
           "matplotlib_inline.backend_inline", "ipywidgets", "IPython", "ipykernel.kernelapp",
           "ipykernel.ipkernel", "ipykernel.zmqshell", "course_utils", "course_utils.toy_task",
           "course_utils.training", "course_utils.minilm", "course_grading.audit.child")
# The learner side only: the instructor's reference implementations and hidden checks are
# never loaded here, so no audit process forked from here holds them.
PACKAGES = ("course_utils.checks", "course_utils.plots", "course_utils.widgets")


def _prctl(option: int, value: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def preload() -> None:
    """Import what every kernel and audit would import, and load the GloVe vectors once."""
    import importlib
    import pkgutil

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a missing optional module only costs its child time
            pass
    for package in PACKAGES:
        try:
            path = importlib.import_module(package).__path__
        except Exception:  # noqa: BLE001
            continue
        for info in pkgutil.iter_modules(path, package + "."):
            try:
                importlib.import_module(info.name)
            except Exception:  # noqa: BLE001
                pass
    try:
        import course_utils
        course_utils.load_glove()
    except Exception:  # noqa: BLE001
        pass


def _mount_points() -> set:
    found = set()
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as fh:
            for line in fh:
                point = line.split()[4].replace("\\040", " ")
                found.add(point)
    except OSError:
        pass
    return found


class Server:
    def __init__(self, sock: socket.socket, keep: list[str]):
        self.sock = sock
        self.reader = sock.makefile("rb")
        self.keep = [os.path.realpath(k) for k in keep]
        self.me = os.getpid()
        self.ended: dict[int, int] = {}  # children reaped before anyone asked

    # ------------------------------------------------------------------ children

    def fork(self, run) -> int:
        pid = os.fork()
        if pid:
            return pid
        try:  # the child: nothing of the server's reaches the code it runs
            self.reader.close()
            self.sock.close()
            os.setsid()
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            os.close(devnull)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            random.seed()
            try:
                import numpy as np
                np.random.seed()
            except Exception:  # noqa: BLE001
                pass
            run()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 0
        except BaseException:  # noqa: BLE001
            code = 1
        os._exit(code)

    def kernel(self, argv: list[str], cwd: str, env: dict) -> int:
        def run():
            _prctl(PR_SET_DUMPABLE, 1)
            os.environ.update(env)
            os.chdir(cwd)
            # as in a kernel started in cwd: modules beside the notebook import (building_blocks)
            sys.path.insert(0, "")
            sys.argv = [sys.executable, *argv]
            from ipykernel import kernelapp
            kernelapp.IPKernelApp.launch_instance(argv=argv)
        return self.fork(run)

    def audit(self, folder: str, cpu: int) -> int:
        def run():
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
            os.chdir(folder)
            from course_grading.audit import child
            child.main(folder)
        return self.fork(run)

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

    def signal(self, pid: int, signum: int) -> None:
        for send in (os.killpg, os.kill):
            try:
                send(pid, signum)
                return
            except OSError:
                continue

    # ------------------------------------------------------------------ reset

    def others(self) -> list[int]:
        pids = []
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) not in (1, self.me):
                pids.append(int(entry))
        return pids

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
                return {"ok": False, "left": len(left)}
            time.sleep(0.01)
        self.ended.clear()
        for root in PRIVATE:
            self.empty(root)
        return {"ok": True}

    def empty(self, folder: str) -> None:
        """Remove everything under ``folder`` except mount points (the kept folders, the
        Python environment) and the folders that lead to them."""
        keep = set(self.keep) | _mount_points()
        self._empty(os.path.realpath(folder), keep)

    def _empty(self, folder: str, keep: set) -> None:
        try:
            entries = os.listdir(folder)
        except OSError:
            return
        for name in entries:
            path = os.path.join(folder, name)
            if path in keep:
                continue
            if any(k.startswith(path + os.sep) for k in keep):
                self._empty(path, keep)
            elif os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    os.unlink(path)
                except OSError:
                    pass

    # ------------------------------------------------------------------ protocol

    def reply(self, message: dict) -> None:
        self.sock.sendall(json.dumps(message).encode() + b"\n")

    def handle(self, request: dict) -> dict:
        op = request.get("op")
        if op == "kernel":
            env = {str(k): str(v) for k, v in (request.get("env") or {}).items() if k in ALLOWED_ENV}
            return {"pid": self.kernel([str(a) for a in request["argv"]], str(request["cwd"]), env)}
        if op == "audit":
            return {"pid": self.audit(str(request["folder"]), int(request.get("cpu", 40)))}
        if op == "poll":
            return {"returncode": self.poll(int(request["pid"]))}
        if op == "signal":
            self.signal(int(request["pid"]), int(request["signal"]))
            return {"ok": True}
        if op == "reset":
            return self.reset()
        return {"error": f"unknown op {op!r}"}

    def serve(self) -> None:
        for line in self.reader:
            try:
                answer = self.handle(json.loads(line))
            except Exception as exc:  # noqa: BLE001 - a bad request gets an answer, not a crash
                answer = {"error": f"{type(exc).__name__}: {exc}"}
            self.reply(answer)


def main(argv: list[str]) -> None:
    _prctl(PR_SET_DUMPABLE, 0)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    sock = socket.socket(fileno=int(argv[1]))
    started = time.monotonic()
    preload()
    server = Server(sock, argv[2:])
    server.reply({"ready": True, "seconds": round(time.monotonic() - started, 3)})
    server.serve()


if __name__ == "__main__":
    main(sys.argv)
