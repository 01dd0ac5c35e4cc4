"""``SandboxKernelManager``: the grading kernel, started inside bubblewrap."""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from jupyter_client.kernelspec import KernelSpec
from jupyter_client.manager import AsyncKernelManager

from .bubblewrap import Cgroups, hidden_roots, seed_home, wrap
from .warm import RemoteProcess, WarmError, WarmSandbox, current_warm, discard_warm


class SandboxKernelManager(AsyncKernelManager):
    """A Python kernel started inside bubblewrap, whatever kernel the notebook names.

    It connects over Unix sockets in a private folder bound into the sandbox and interrupts
    with a message (a signal would reach only bwrap). ``COURSE_SANDBOX_HIDE`` in the
    environment names the course roots to hide (set by ``configure``).
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._folder = Path(tempfile.mkdtemp(prefix="course-sandbox-"))
        (self._folder / "ipc").mkdir()
        self._scratch = self._folder / "work"
        self._cwd: Path | None = None
        self._groups: Cgroups | None = None
        self._warm: WarmSandbox | None = None
        self._kernel_args: list[str] = []
        self.transport = "ipc"
        self.ip = str(self._folder / "ipc" / "kernel")
        self.connection_file = str(self._folder / "ipc" / "connection.json")
        self._spec = KernelSpec(argv=[sys.executable, "-m", "ipykernel_launcher", "-f",
                                      "{connection_file}"],
                                display_name="Python 3 (sandboxed)", language="python",
                                interrupt_mode="message", env={}, metadata={})

    @property
    def kernel_spec(self):  # the notebook's kernelspec name is ignored on purpose
        return self._spec

    async def _async_pre_start_kernel(self, **kw):
        self._cwd = Path(kw.get("cwd") or os.getcwd()).resolve()
        self._warm = current_warm()
        if self._warm is not None:
            try:  # the warm sandbox: emptied, then given this submission's folder
                self._warm.prepare(self._cwd)
                self.ip = str(self._warm.ipc / "kernel")
                self.connection_file = str(self._warm.ipc / "connection.json")
                kw["cwd"] = str(self._warm.work)
            except WarmError:
                self._warm = None
        if self._warm is None:
            self._copy_scratch()
        return await super()._async_pre_start_kernel(**kw)

    def _copy_scratch(self):
        if self._scratch.exists():
            shutil.rmtree(self._scratch)
        shutil.copytree(self._cwd, self._scratch, symlinks=True,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints"))

    def format_kernel_cmd(self, extra_arguments=None):
        self._kernel_args = ["-f", self.connection_file, *(extra_arguments or [])]
        if self._warm is not None:  # launched by _async_launch_kernel, not as a command
            return [sys.executable, "-m", "ipykernel_launcher", *self._kernel_args]
        return self._cold_command()

    def _cold_command(self) -> list[str]:
        command = [sys.executable, "-m", "ipykernel_launcher", *self._kernel_args]
        if self._groups is not None:
            self._groups.remove()
        argv, self._groups = wrap(command, scratch=self._scratch, cwd=self._cwd or Path.cwd(),
                                  hidden_roots=hidden_roots(),
                                  rw=(Path(self.connection_file).parent,), home=self._home())
        return argv

    async def _async_launch_kernel(self, kernel_cmd, **kw):
        if self._warm is not None:
            try:
                pid = self._warm.spawn_kernel(self._kernel_args, _grading_env())
            except WarmError:  # the warm sandbox broke: this kernel starts the slow way
                discard_warm(self._warm)
                self._warm = None
                self._copy_scratch()
                return await super()._async_launch_kernel(self._cold_command(), **kw)
            self.provisioner.process = RemoteProcess(self._warm, pid)
            self.provisioner.pid, self.provisioner.pgid = None, None
            self.provisioner.cwd = str(self._warm.work)
            self._reconcile_connection_info(self.provisioner.connection_info)
            return None
        return await super()._async_launch_kernel(kernel_cmd, **kw)

    def _home(self) -> Path:
        home = self._folder / "home"
        if not home.exists():
            seed_home(home)
        return home

    async def _async_cleanup_resources(self, restart=False):
        await super()._async_cleanup_resources(restart=restart)
        if not restart:
            self._release()

    cleanup_resources = _async_cleanup_resources

    def _release(self):
        if self._groups is not None:
            self._groups.remove()
            self._groups = None
        shutil.rmtree(self._folder, ignore_errors=True)


def _grading_env() -> dict[str, str]:
    """What a warm kernel takes from the grader's environment at launch: nbgrader's grading
    flag (the notebooks skip their demos under it)."""
    return {k: os.environ[k] for k in ("NBGRADER_EXECUTION",) if k in os.environ}
