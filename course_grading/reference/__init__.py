"""Reference implementations of every graded component, one per component.

The graders compare students' work with these; later notebooks import them rather than
re-writing earlier exercises. They follow the contract in the course's CURRICULUM: batch first,
boolean masks where True means "may attend", and no device moves of their own.
"""
