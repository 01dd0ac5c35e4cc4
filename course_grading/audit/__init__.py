"""The integrity audit: every graded function of a submission re-run, in a separate sandboxed
process, on fresh inputs drawn from a secret seed, and compared with the reference.

    trusted     the grader's side: draws the inputs, runs the child, judges what came back
    child       the untrusted side: runs the submission's cells and calls, writes plain data
    wire        the files the two exchange (JSON and .npy, never pickle)
    exercises   what is audited, exercise by exercise, and how its inputs are drawn
    hooks       the child's record: audit hooks and dispatcher kernels armed before any cell
    memory      the child's routes to raw memory closed before any cell: numpy's array
                interfaces, torch's raw pointers, sparse tensors, /proc/self/mem, ctypes
    channel     the pipe that carries the record out of the child, drained as it is written
    evidence    the grader's reading of the record: escapes, tampering, forbidden operators
    forbidden   which operators the child records, and which each exercise may not run
    derive      which operators each forbidden built-in reaches, found by running it
"""

# The audit as a sandbox server runs it, handed to the sandbox by name (``sandbox.warm.hand_audit``,
# called by ``trusted``): the sandbox imports nothing of the audit. "module" names are imported,
# "module:function" names called; every name here stays plain data, loaded in the sandbox too.
SANDBOX_ENTRY = {
    "preload": ["course_grading.audit.child"],  # imported by a warm server before it forks
    "warm_up": ["course_grading.audit.forbidden:recorded_ops"],  # the operators, looked up once
    "prepare": "course_grading.audit.child:stand_in_unaudited",  # in the child, before main
    "main": "course_grading.audit.child:main",  # main(FOLDER, RECORD_FD)
    "pipe": "course_grading.audit.channel:open_pipe",  # the record's pipe: (read end, write end)
    "drain": "course_grading.audit.channel:Drain",  # Drain(read end): the server keeps it
}
