"""``SandboxKernelManager``: the grading kernel, a job of a sandbox server (``warm``)."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from jupyter_client.kernelspec import KernelSpec
from jupyter_client.manager import AsyncKernelManager
from traitlets import List, Unicode

from . import warm
from .settings import Sandbox, Settings

POLL_S = 0.01  # how often a kernel that was asked to end is looked at


class SandboxKernelManager(AsyncKernelManager):
    """A Python kernel started in a sandbox, whatever kernel the notebook names.

    The kernel is forked by this grading process's warm sandbox server (else by a server of
    its own) into fresh namespaces, with a private copy of the notebook's folder as its
    working folder. It connects over Unix sockets in a folder of its own, read-only to it once
    they are bound, and is interrupted with a message (a signal would reach only bwrap). The
    connection file stays on the grader's side. Its limits come from ``c.Sandbox``.
    """

    hidden_folders = List(
        Unicode(),
        help="Folders every sandboxed process finds empty: the "
        "course folders (set by course_grading's pipeline) "
        "and any other.",
    ).tag(config=True)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._folder = Path(tempfile.mkdtemp(prefix="course-kernel-"))  # never seen by a sandbox
        self._server: warm.SandboxServer | None = None
        self._job: warm.Job | None = None
        self._source: Path | None = None
        self._extra: list[str] = []
        self.transport = "ipc"
        self.ip = str(self._folder / "kernel")  # replaced by the job's socket folder
        self.connection_file = str(self._folder / "connection.json")
        self._spec = KernelSpec(
            argv=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            display_name="Python 3 (sandboxed)",
            language="python",
            interrupt_mode="message",
            env={},
            metadata={},
        )

    @property
    def kernel_spec(self):  # the notebook's kernelspec name is ignored on purpose
        return self._spec

    def sandbox_settings(self) -> Settings:
        return Settings.from_config(
            self.config, hidden=[*self.hidden_folders, *Sandbox(config=self.config).hidden_folders]
        )

    async def _async_pre_start_kernel(self, **kw):
        self._end_job()  # a restart: the previous job goes first
        self._source = Path(kw.get("cwd") or os.getcwd()).resolve()
        self._server, self._job = warm.open_job(self.sandbox_settings(), self._source, kernel=True)
        self._use_job()
        kw["cwd"] = self._job.path
        return await super()._async_pre_start_kernel(**kw)

    def _use_job(self, rewrite: bool = False) -> None:
        self.ip = str(self._job.ipc_here / "k")
        if rewrite:  # the sockets move to the new job's folder: a new connection file
            self.cleanup_connection_file()
            self._connection_file_written = False
            self.write_connection_file()
            self.provisioner.connection_info = self.get_connection_info()

    def format_kernel_cmd(self, extra_arguments=None):
        self._extra = [str(a) for a in extra_arguments or []]  # the server starts the kernel
        return [sys.executable, "-m", "ipykernel_launcher", "-f", self.connection_file, *self._extra]

    def _spawn(self) -> int:
        info = self.get_connection_info()
        connection = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in info.items()}
        connection["ip"] = str(self._job.ipc / "k")  # the same sockets, as the kernel sees them
        return self._server.spawn_kernel(self._job, self._extra, connection, _grading_env())

    async def _async_launch_kernel(self, kernel_cmd, **kw):
        try:
            pid = self._spawn()
        except warm.SandboxError:
            if not self._server.warm:
                raise
            # the warm server broke: this kernel gets a server of its own, the next a new warm one
            warm.discard_warm(self._server)
            self._server, self._job = warm.open_single(self.sandbox_settings(), self._source, kernel=True)
            self._use_job(rewrite=True)
            pid = self._spawn()
        self.provisioner.process = warm.RemoteProcess(self._server, pid)
        self.provisioner.pid, self.provisioner.pgid = None, None
        self.provisioner.cwd = self._job.path
        self._reconcile_connection_info(self.provisioner.connection_info)

    async def _async_wait(self, pollinterval: float = 0.1) -> None:
        """Until the kernel has ended, asked every ``POLL_S`` (jupyter_client asks every 0.1 s:
        at each submission's end, up to 0.1 s with nothing to do). A question is one message
        to the sandbox server, which answers from ``waitpid``."""
        await super()._async_wait(pollinterval=min(pollinterval, POLL_S))

    async def _async_cleanup_resources(self, restart=False):
        await super()._async_cleanup_resources(restart=restart)
        self._end_job()
        if not restart:
            shutil.rmtree(self._folder, ignore_errors=True)

    cleanup_resources = _async_cleanup_resources

    def _end_job(self) -> None:
        if self._job is not None and self._server is not None:
            warm.release_job(self._server, self._job)
        self._server, self._job = None, None


def _grading_env() -> dict[str, str]:
    """What a kernel takes from the grader's environment at launch: nbgrader's grading flag
    (the notebooks skip their demos under it)."""
    return {k: os.environ[k] for k in ("NBGRADER_EXECUTION",) if k in os.environ}
