"""One SQLAlchemy engine per gradebook in a process, for every nbgrader ``Gradebook`` opened.

nbgrader's ``Gradebook`` makes a new engine each time it is opened and disposes of it when
closed; one submission's autograde opens about nine. SQLAlchemy keeps its cache of compiled
statements on the engine, so every query of every ``Gradebook`` was compiled anew (about a
tenth of a grading worker's own CPU time). ``nbgrader_patches.share_engines()`` makes
nbgrader's ``Gradebook`` take its engine from ``engine_for``, which keeps one per URL: a closed ``Gradebook`` still
disposes of the engine's pool (its connections are closed; a new pool opens the next), only
the compiled statements are kept. Sessions stay one per ``Gradebook``, as before.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

KEPT = 8  # engines kept (the least recently used goes): a process grades one course at a time

_ENGINES: OrderedDict = OrderedDict()
_LOCK = threading.Lock()


def engine_for(url, **kwargs):
    """SQLAlchemy's ``create_engine(url, **kwargs)``, made once per URL and arguments."""
    from sqlalchemy import create_engine

    key = (str(url), tuple(sorted((k, repr(v)) for k, v in kwargs.items())))
    with _LOCK:
        engine = _ENGINES.get(key)
        if engine is None:
            engine = _ENGINES[key] = create_engine(url, **kwargs)
            while len(_ENGINES) > KEPT:
                _ENGINES.popitem(last=False)  # dropped, not disposed: a Gradebook may hold it
        else:
            _ENGINES.move_to_end(key)
        return engine
