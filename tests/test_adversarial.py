"""The adversarial catalogue: 27 kinds of broken or cheating submissions of 01_embeddings,
graded together in ONE sandboxed, audited autograde run (two workers).

Whatever a submission does, the run completes, every student has a row, honest students get
exactly the scores they get when graded alone, the gradebook stays intact, and every cheat
ends at zero for what it cheated on, or flagged for the instructor (the expected outcome of
each kind is in CATALOGUE).
"""
from __future__ import annotations

import hashlib
import socket
import sqlite3
import threading
from pathlib import Path

import nbformat
import pytest
from nbgrader.utils import compute_checksum

from conftest import ROOT
from course_grading import autograde, feedback
from course_grading.cells import hidden_lines
from course_grading.sandbox import bubblewrap
from course_grading.nbformat_tools import write_notebook

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not bubblewrap.available()[0], reason="needs a working bubblewrap sandbox")]

A = "01_embeddings"
FULL = {"test_encode": 1.0, "test_one_hot": 2.0, "test_embed": 2.0}
WRONG_ONE_HOT = "def one_hot(ids, vocab_size):\n    return np.zeros((*np.shape(ids), vocab_size))\n"
CORRECT_ONE_HOT = ("def one_hot(ids, vocab_size):\n    ids = np.asarray(ids)\n"
                   "    return (ids[..., None] == np.arange(vocab_size)).astype(np.float64)\n")
PORT_FILE = "PORT"  # the test's listening port is substituted below


def _body(code: str) -> str:
    return "\n".join("    " + line for line in code.splitlines())


# kind -> (changes, expected): changes maps a grade_id to new source (or a callable on the
# cell); expected is "full", "zero:<grade_id>" (that exercise scores 0), or "flag:<grade_id>"
# (flagged, whatever it scored). "+flag" adds that a flag must be raised as well (also when
# the grading of that submission broke: an error row, scored 0 in the gradebook).
CATALOGUE = {
    "correct": ({}, "full"),
    "correct_warns": ({"one_hot": "import warnings, sys\n" + CORRECT_ONE_HOT.replace(
        "    ids = np.asarray(ids)\n",
        "    warnings.warn('deprecated thing')\n    print('note', file=sys.stderr)\n    ids = np.asarray(ids)\n")}, "full"),
    "correct_huge_output": ({"one_hot": "for _ in range(40):\n    print('x' * 1_000_000)\n" + CORRECT_ONE_HOT}, "full"),
    "honest_partial": ({"one_hot": WRONG_ONE_HOT}, "zero:test_one_hot"),
    "infinite_loop": ({"one_hot": "def one_hot(ids, vocab_size):\n    while True:\n        pass\n"}, "zero:test_one_hot"),
    "ignores_sigint": ({"one_hot": "import signal\ndef one_hot(ids, vocab_size):\n"
                        "    signal.signal(signal.SIGINT, signal.SIG_IGN)\n    while True:\n        pass\n"},
                       "zero:test_one_hot"),
    "os_exit": ({"one_hot": CORRECT_ONE_HOT + "import os\nos._exit(3)\n"}, "zero:test_one_hot+flag"),
    "memory_bomb": ({"one_hot": "def one_hot(ids, vocab_size):\n    hog = bytearray(16 * 2**30)\n"
                     "    return hog\n"}, "zero:test_one_hot"),
    "fork_bomb": ({"one_hot": "import os, time\ndef one_hot(ids, vocab_size):\n    for _ in range(400):\n"
                   "        if os.fork() == 0:\n            time.sleep(30)\n            os._exit(0)\n"
                   "    return None\n"}, "zero:test_one_hot+flag"),
    "syntax_error": ({"one_hot": "def one_hot(ids, vocab_size)\n    return ids\n"}, "zero:test_one_hot"),
    "nan_output": ({"one_hot": "def one_hot(ids, vocab_size):\n"
                    "    return np.full((*np.shape(ids), vocab_size), np.nan)\n"}, "zero:test_one_hot"),
    "wrong_dtype": ({"one_hot": CORRECT_ONE_HOT.replace(".astype(np.float64)", ".astype(str)")}, "zero:test_one_hot"),
    "deleted_test_cell": ({"one_hot": WRONG_ONE_HOT, "test_one_hot": None}, "zero:test_one_hot+flag"),
    "edited_test_cell": ({"one_hot": WRONG_ONE_HOT, "test_one_hot": "pass\n"}, "zero:test_one_hot+flag"),
    "rechecksummed_test_cell": ({"one_hot": WRONG_ONE_HOT, "test_one_hot": ("print('ok')\n", "rechecksum")},
                                "zero:test_one_hot+flag"),
    "changed_points": ({"one_hot": WRONG_ONE_HOT, "test_one_hot": ("points", 100)}, "zero:test_one_hot+flag"),
    "skip_execution_tag": ({"one_hot": WRONG_ONE_HOT, "test_one_hot": ("tags", ["skip-execution"])},
                           "zero:test_one_hot+flag"),
    "patched_allclose": ({"one_hot": "np.allclose = lambda *a, **k: True\nnp.array_equal = lambda *a, **k: True\n"
                          + WRONG_ONE_HOT}, "zero:test_one_hot+flag"),
    # the visible call goes through the notebook's namespace; the hidden half, imported from
    # course_grading, runs the visible check again: the patch gains nothing
    "patched_checker": ({"one_hot": WRONG_ONE_HOT + "check_one_hot = lambda *a, **k: None\n"},
                        "zero:test_one_hot+flag"),
    "input_transformer": ({"one_hot": WRONG_ONE_HOT + (
        "get_ipython().input_transformers_post.append(\n"
        "    lambda lines: ['pass\\n'] if any('check_one_hot' in l for l in lines) else lines)\n")},
        "flag:test_one_hot"),
    "reads_gradebook": ({"one_hot": "import os\nif os.path.exists(GRADEBOOK):\n" + _body(CORRECT_ONE_HOT)
                         + "\nelse:\n" + _body(WRONG_ONE_HOT)}, "zero:test_one_hot+flag"),
    "writes_gradebook": ({"one_hot": "import sqlite3\ntry:\n    db = sqlite3.connect(GRADEBOOK)\n"
                          "    db.execute('UPDATE grade SET manual_score = 99')\n    db.commit()\n"
                          "except Exception:\n    pass\n" + WRONG_ONE_HOT}, "zero:test_one_hot+flag"),
    "unmounts_what_hides_the_course": ({"one_hot": "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                                        "for _ in range(3):\n    libc.umount2(os.path.dirname(GRADEBOOK).encode(), 2)\n"
                                        "if os.path.exists(GRADEBOOK):\n" + _body(CORRECT_ONE_HOT)
                                        + "\nelse:\n" + _body(WRONG_ONE_HOT)}, "zero:test_one_hot+flag"),
    "plants_in_home": ({"one_hot": "import os\nstartup = os.path.expanduser('~/.ipython/profile_default/startup')\n"
                        "try:\n    os.makedirs(startup, exist_ok=True)\n"
                        "    open(os.path.join(startup, %r), 'w').write('PLANTED = 1')\n"
                        "except OSError:\n    pass\n" % "00-course-adversarial.py" + WRONG_ONE_HOT},
                       "zero:test_one_hot"),
    "patches_checker_file": ({"one_hot": "try:\n    open(CHECKS_FILE, 'a').write('\\n# patched\\n')\n"
                              "except OSError:\n    pass\n" + WRONG_ONE_HOT}, "zero:test_one_hot+flag"),
    "network": ({"one_hot": "import socket\ntry:\n    socket.create_connection(('127.0.0.1', PORT), 2).sendall(b'leak')\n"
                 "    CONNECTED = True\nexcept OSError:\n    CONNECTED = False\n"
                 "if CONNECTED:\n" + _body(CORRECT_ONE_HOT) + "\nelse:\n" + _body(WRONG_ONE_HOT)},
                "zero:test_one_hot+flag"),
    "calls_reference": ({"one_hot": "from course_grading.reference.embeddings import one_hot as _ref\n"
                         "def one_hot(ids, vocab_size):\n    return _ref(ids, vocab_size)\n"}, "zero:test_one_hot+flag"),
}


def _variant(source_nb, changes: dict, constants: str):
    nb = nbformat.from_dict(nbformat.reads(nbformat.writes(source_nb), 4))
    cells = []
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        change = changes.get(gid, ...)
        if change is None:
            continue  # deleted
        if isinstance(change, str):
            needs = any(name in change for name in ("GRADEBOOK", "CHECKS_FILE", "PORT"))
            cell.source = (constants + change) if needs else change
        elif isinstance(change, tuple):
            key, value = change
            if key == "points":
                cell.metadata.nbgrader["points"] = value
            elif key == "tags":
                cell.metadata["tags"] = value
            else:  # new source and a checksum that matches it
                cell.source = key
                cell.metadata.nbgrader["checksum"] = compute_checksum(cell)
        cells.append(cell)
    nb.cells = cells
    return nb


def _grade_cells_digest(db: Path) -> str:
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT b.name, g.max_score FROM grade_cells g JOIN base_cell b ON b.id = g.id "
                           "ORDER BY b.name").fetchall()
        rows += con.execute("SELECT name, source, checksum, locked FROM source_cell ORDER BY name").fetchall()
    return hashlib.sha256(repr(rows).encode()).hexdigest()


def _course(root: Path) -> Path:
    (root / "solutions").mkdir(parents=True)
    config = (ROOT / "nbgrader_config.py").read_text() + "\nc.Execute.timeout = 8\n"
    (root / "nbgrader_config.py").write_text(config)
    nb = nbformat.read(str(ROOT / "solutions" / A / f"{A}.ipynb"), 4)
    (root / "solutions" / A).mkdir()
    write_notebook(nb, root / "solutions" / A / f"{A}.ipynb")
    return root


def _submit(course: Path, student: str, nb) -> None:
    folder = course / "submitted" / student / A
    folder.mkdir(parents=True)
    write_notebook(nb, folder / f"{A}.ipynb")


def _scores(result) -> dict:
    return {e.grade_id: e.score for e in result.exercises}


def test_catalogue_in_one_run(tmp_path):
    assert len(CATALOGUE) >= 20
    course = _course(tmp_path / "course")
    received = []
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(5)
    listener.settimeout(0.5)

    def accept():
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
                received.append(conn.recv(100))
            except OSError:
                pass
    stop = threading.Event()
    thread = threading.Thread(target=accept, daemon=True)
    thread.start()

    checks_file = ROOT / "course_utils" / "checks" / "embeddings.py"
    checks_before = checks_file.read_bytes()
    constants = (f"GRADEBOOK = {str(course / 'gradebook.db')!r}\nCHECKS_FILE = {str(checks_file)!r}\n"
                 f"PORT = {listener.getsockname()[1]}\n")
    source = nbformat.read(str(course / "solutions" / A / f"{A}.ipynb"), 4)
    for kind, (changes, _) in CATALOGUE.items():
        _submit(course, kind, _variant(source, changes, constants))

    # honest students graded alone, for comparison
    alone = _course(tmp_path / "alone")
    for kind in ("correct", "honest_partial"):
        _submit(alone, kind, _variant(source, CATALOGUE[kind][0], constants))
    alone_scores = {r.student: _scores(r) for r in autograde.autograde(alone, jobs=2, progress=False)}

    autograde._prepare_gradebook(course, [A], sorted(CATALOGUE))
    digest = _grade_cells_digest(course / "gradebook.db")
    try:
        results = {r.student: r for r in autograde.autograde(course, jobs=2, progress=False)}
    finally:
        stop.set()
        thread.join(2)
        listener.close()

    assert sorted(results) == sorted(CATALOGUE)  # every student has a row
    outcomes = {}
    for kind, (_, expected) in CATALOGUE.items():
        r = results[kind]
        scores, flagged = _scores(r), {f.where for f in r.flags}
        outcomes[kind] = (r.error, scores, [str(f) for f in r.flags])
        if expected == "full":
            assert scores == FULL, (kind, outcomes[kind])
            continue
        what, _, gid = expected.partition(":")
        gid, _, need_flag = gid.partition("+")
        cheated = 0 if r.error else scores.get(gid, 0)
        if what == "zero":
            assert cheated == 0, (kind, outcomes[kind])
        if what == "flag" or need_flag:  # flagged, even when its grading broke (an error row at 0)
            assert r.flags, (kind, outcomes[kind])
        if what == "flag":
            assert cheated == 0 or gid in flagged, (kind, outcomes[kind])

    # honest students: the same grades as alone; the correct-but-noisy ones full marks
    assert _scores(results["correct"]) == alone_scores["correct"] == FULL
    assert _scores(results["honest_partial"]) == alone_scores["honest_partial"]
    assert not results["correct"].flags and not results["correct_warns"].flags
    # the audit (not only the scanner) caught the input transformer, which skips the whole cell
    assert any("audit disagrees" in f.reason and f.where == "test_one_hot"
               for f in results["input_transformer"].flags)
    # the gradebook is intact, nothing left the sandbox
    with sqlite3.connect(course / "gradebook.db") as con:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert con.execute("SELECT COUNT(*) FROM grade WHERE manual_score = 99").fetchone()[0] == 0
    assert _grade_cells_digest(course / "gradebook.db") == digest
    assert received == []
    assert checks_file.read_bytes() == checks_before
    assert not (Path.home() / ".ipython" / "profile_default" / "startup" / "00-course-adversarial.py").exists()
    huge = course / "autograded" / "correct_huge_output" / A / f"{A}.ipynb"
    assert huge.stat().st_size < 5_000_000


def test_feedback_leaks_no_hidden_test(tmp_path):
    """Feedback for a failing student: per-exercise messages, no hidden-test line or value."""
    course = _course(tmp_path / "course")
    source = nbformat.read(str(course / "solutions" / A / f"{A}.ipynb"), 4)
    _submit(course, "failing", _variant(source, {"one_hot": WRONG_ONE_HOT, "embed":
                                                 "def embed(ids, E):\n    return np.asarray(E)[0]\n"}, ""))
    [result] = autograde.autograde(course, jobs=1, progress=False)
    assert result.exercises and any(e.message for e in result.exercises if not e.passed)
    [page] = feedback.feedback(course)
    html = page.read_text(encoding="utf-8")
    hidden = set()
    for cell in source.cells:
        hidden |= hidden_lines(cell.source)
    import inspect
    from course_grading.checks import embeddings
    hidden_values = _hidden_literals(inspect.getsource(embeddings))
    assert hidden_values, "no literal inputs found in the hidden checks: the test would be empty"
    assert "one_hot" in html and "embed" in html
    for line in hidden:
        assert line not in html, line
    for value in hidden_values:
        assert value not in html, value


def _hidden_literals(check_source: str) -> set[str]:
    """Literal inputs of the hidden checks (a module of course_grading.checks: all of it is hidden)."""
    import re
    found = set()
    for line in check_source.splitlines():
        found |= set(re.findall(r"np\.array\(\[[^\]]{6,}\]\)?|\[[^\[\]]{8,}\]", line.strip()))
    return found
