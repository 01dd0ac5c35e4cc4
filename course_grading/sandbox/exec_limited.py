"""Trusted launcher of every sandboxed process (standard library only; run with ``python -I``).

    python -I _sandbox_exec.py SPEC_JSON -- COMMAND ...

SPEC_JSON: {"rlimits": {"RLIMIT_CPU": n, ...}, "cgroups": ["/sys/fs/cgroup/pids/.../x", ...],
"cgroup_files": {"pids.max": "128", ...}, "env": {...}}. It joins the per-sandbox cgroups (made
by the parent), sets the resource limits, replaces the environment and executes COMMAND (bwrap),
so that everything the student's code starts inherits all of it.
"""

import json
import os
import resource
import sys


def main(argv):
    spec = json.loads(argv[1])
    command = argv[argv.index("--") + 1 :]
    for group in spec.get("cgroups", []):
        with open(os.path.join(group, "cgroup.procs"), "w") as fh:
            fh.write(str(os.getpid()))
    for name, value in spec.get("rlimits", {}).items():
        limit = getattr(resource, name)
        hard = resource.getrlimit(limit)[1]
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(limit, (value, value))
    if spec.get("quiet"):  # the process's own stdout (not the notebook's): the kernel's banner
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    os.umask(0o077)
    os.execvpe(command[0], command, spec.get("env", {}))


if __name__ == "__main__":
    main(sys.argv)
