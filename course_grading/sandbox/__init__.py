"""Student code under grading runs here: bubblewrap sandboxes, the warm sandbox that forks
grading kernels and audits, and the kernel manager nbgrader uses to start them.

    bubblewrap               the sandbox itself: options, limits, cgroups, the course folders hidden
    exec_limited             trusted launcher of every sandboxed process (limits, cgroups, env)
    warm                     the grader's side of the warm sandbox
    warm_server              the warm sandbox's side (runs inside bubblewrap)
    sandbox_kernel_manager   SandboxKernelManager, the jupyter_client kernel manager for nbgrader
"""
