"""Tested plotting and data functions, one module per notebook topic (e.g. ``plots.attention``).

Each function returns the figure/axes it drew and the numbers it drew, so tests can check them
without looking at pixels. matplotlib is imported inside the modules, never here.
"""
