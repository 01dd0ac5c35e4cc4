"""The hidden checks: the second half of every grade cell, which students never see.

``course_grading.checks.<module>.check_<exercise>(fn)`` runs after the visible check of the same
name in ``course_utils.checks.<module>`` and adds the cases that catch the common mistakes,
comparing with ``course_grading.reference``. A grade cell reads::

    check_softmax(softmax)
    ### BEGIN HIDDEN TESTS
    from course_grading.checks.attention import check_softmax as hidden_check_softmax
    hidden_check_softmax(softmax)
    ### END HIDDEN TESTS

A module may also define ``ASSIGNMENT`` and ``expected_outputs()`` (see ``course_grading.expected``).

A grading kernel loads ``_common`` as an IPython extension before the first cell
(``KERNEL_ARGUMENT``, which ``LimitedExecute`` gives every kernel it starts).
"""

EXTENSION = __name__ + "._common"
KERNEL_ARGUMENT = f"--IPKernelApp.extensions={EXTENSION}"
