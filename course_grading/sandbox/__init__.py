"""Student code under grading runs here: bubblewrap sandboxes, the sandbox server that forks
grading kernels and audits into fresh namespaces, and the kernel manager nbgrader uses.

    settings                 c.Sandbox.* (limits, warm or not, hidden folders), the course folders
    bubblewrap               the sandbox itself: options, limits, cgroups, what stays hidden
    exec_limited             trusted launcher of every sandbox (limits, cgroups, environment)
    warm_server              the sandbox's server (runs inside bubblewrap), forking each child
    preload                  what the server imports before it forks; the secret modules refused
    children                 what each forked child sets up: fresh namespaces, a kernel's profile
    isolate                  namespaces, tmpfs, binds and dropped privileges of each child
    warm                     the grader's side of the servers: the warm one, jobs, audits
    sandbox_kernel_manager   SandboxKernelManager, the jupyter_client kernel manager for nbgrader
    installed                grading imports the installed course only
"""
