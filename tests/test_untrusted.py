"""Reading files someone else wrote: no link followed, no wait on a FIFO, regular files only,
size caps; copying a submission that way; the audit reading back what its sandbox wrote."""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path

import pytest

from audit_runner import in_process
from course_grading import untrusted
from course_grading.untrusted import UntrustedFileError

ROOT = Path(__file__).resolve().parents[1]


def _within(seconds: float, fn, *args):
    """``fn(*args)`` run in a thread that must finish within ``seconds`` (no hang)."""
    box = {}

    def target():
        try:
            box["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - whatever the call raised is the result
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{fn.__name__} hung"
    if "error" in box:
        raise box["error"]
    return box["value"]


def test_read_bytes_refuses_what_is_not_a_small_regular_file(tmp_path):
    good = tmp_path / "good"
    good.write_bytes(b"12345")
    assert untrusted.read_bytes(good, 5) == b"12345"
    (tmp_path / "link").symlink_to(good)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "folder").mkdir()
    for name, why in (
        ("link", "is a symbolic link"),
        ("dangling", "is a symbolic link"),
        ("fifo", "is a named pipe (FIFO)"),
        ("folder", "is a folder"),
    ):
        with pytest.raises(UntrustedFileError, match=re.escape(why)):
            _within(5, untrusted.read_bytes, tmp_path / name, 100)
    with pytest.raises(UntrustedFileError, match="is over 4 bytes"):
        untrusted.read_bytes(good, 4)
    with pytest.raises(UntrustedFileError, match="is a device"):
        untrusted.read_bytes("/dev/zero", 100)
    with pytest.raises(FileNotFoundError):
        untrusted.read_bytes(tmp_path / "absent", 100)
    with pytest.raises(UntrustedFileError, match="plain file name"):
        untrusted.read_in(tmp_path, "../good", 100)


def test_copy_tree_copies_regular_files_only(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    (src / "sub" / "deeper").mkdir(parents=True)
    (src / "nb.ipynb").write_text("{}")
    (src / "sub" / "data.csv").write_text("a,b\n")
    (src / "sub" / "deeper" / "x.txt").write_text("x")
    (src / "big.bin").write_bytes(b"0" * 2000)
    (src / "link.txt").symlink_to(src / "nb.ipynb")
    (src / "sub" / "linked_dir").symlink_to(src / "sub" / "deeper")
    os.mkfifo(src / "pipe")
    (src / ".ipynb_checkpoints").mkdir()
    (src / ".ipynb_checkpoints" / "nb-checkpoint.ipynb").symlink_to("/etc/hostname")
    left = _within(10, lambda: untrusted.copy_tree(src, dst, max_file_bytes=1000))
    assert sorted(str(p.relative_to(dst)) for p in dst.rglob("*")) == [
        "nb.ipynb",
        "sub",
        "sub/data.csv",
        "sub/deeper",
        "sub/deeper/x.txt",
    ]
    assert {(item.path, item.reason) for item in left} == {
        ("big.bin", "is over 1000 bytes"),
        ("link.txt", "is a symbolic link"),
        ("pipe", "is a named pipe (FIFO)"),
        ("sub/linked_dir", "is a symbolic link"),
    }
    (tmp_path / "src_link").symlink_to(src)
    with pytest.raises(UntrustedFileError, match="is a symbolic link"):
        untrusted.copy_tree(tmp_path / "src_link", tmp_path / "dst2")


def test_audit_reads_a_fifo_or_link_as_unreadable_output(tmp_path):
    """What the sandboxed child leaves in its folder is read back without waiting on a FIFO
    or following a link: that exercise's verdict says so, the others are judged as usual."""
    from course_grading.audit import trusted

    assignment = "01_embeddings"
    notebook = ROOT / "solutions" / assignment / f"{assignment}.ipynb"

    def runner(folder: Path) -> str:
        in_process(folder)  # the real child, in this process; then the files are tampered with
        os.unlink(folder / "out-test_one_hot.json")
        os.mkfifo(folder / "out-test_one_hot.json")
        out = json.loads((folder / "out-test_embed.json").read_text())
        name = out["outputs"][0]["value"]["nd"]
        os.unlink(folder / name)
        (folder / name).symlink_to(ROOT / "README.md")
        return ""

    fifos, done, hung = [], threading.Event(), []

    def unblock():  # were the reader waiting on the FIFO, a writer lets it go on (and the test fail)
        if not done.wait(60):
            hung.append(True)
            for fifo in fifos:
                os.close(os.open(fifo, os.O_WRONLY))

    threading.Thread(target=unblock, daemon=True).start()
    original = runner

    def runner(folder: Path) -> str:  # noqa: F811 - the child runs in this (main) thread: it uses signals
        fifos.append(folder / "out-test_one_hot.json")
        return original(folder)

    try:
        verdicts = {v.grade_id: v for v in trusted.audit(notebook, assignment, runner=runner)}
    finally:
        done.set()
    assert not hung
    assert not verdicts["test_one_hot"].agrees
    assert (
        verdicts["test_one_hot"].reason == "unreadable output: out-test_one_hot.json is a named pipe (FIFO)"
    )
    assert not verdicts["test_embed"].agrees and "is a symbolic link" in verdicts["test_embed"].reason
    assert verdicts["test_encode"].agrees  # the untouched exercise is judged as usual


# --------------------------------------------------------------------------- notebook bounds


def _notebook_text(cells, metadata="{}") -> bytes:
    return (
        '{"cells": ['
        + ",".join(cells)
        + '], "metadata": '
        + metadata
        + ', "nbformat": 4, "nbformat_minor": 5}'
    ).encode()


def _markdown(source='""', metadata="{}", extra="") -> str:
    return (
        '{"cell_type": "markdown", "id": "m", "metadata": ' + metadata + ', "source": ' + source + extra + "}"
    )


BOMBS = {  # bound named in the refusal: notebook bytes
    "holds more than 100000 JSON objects and arrays": _notebook_text(
        [_markdown(metadata='{"x": [' + "{}," * 2_000_000 + "{}]}")]
    ),
    "holds more than 1000000 JSON values": _notebook_text(
        [_markdown(source="[" + '"a",' * 1_200_000 + '"a"]')]
    ),
    "nests JSON objects and arrays more than 64 deep": _notebook_text(
        [_markdown(extra=', "attachments": {"a.png": ' + "[" * 5000 + "]" * 5000 + "}")]
    ),
    "has more than 2000 cells": _notebook_text([_markdown()] * 3000),
    "has a cell (cell 1) whose metadata is over 64 KB": _notebook_text(
        [_markdown(), _markdown(metadata='{"x": "' + "y" * 70_000 + '"}')]
    ),
    "is over 32 MB": _notebook_text([_markdown(source='"' + "x" * (33 * 2**20) + '"')]),
}


@pytest.mark.parametrize("bound", sorted(BOMBS))
def test_a_notebook_beyond_a_bound_is_refused_before_it_is_parsed(bound, tmp_path):
    """Each bound is checked by a linear scan of the bytes that builds nothing: refusing costs
    little time and little memory beyond the bytes themselves."""
    import time
    import tracemalloc

    data = BOMBS[bound]
    tracemalloc.start()
    start = time.perf_counter()
    try:
        assert untrusted.notebook_problem(data) == bound
        with pytest.raises(UntrustedFileError, match=re.escape(bound)):
            untrusted.load_notebook(data, "nb.ipynb")
    finally:
        took, peak = time.perf_counter() - start, tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert took < 30  # milliseconds here; parsing the first one took minutes
    assert peak < 3 * len(data) + 64 * 2**20, peak  # the bytes, a copy without strings; no objects


def test_a_notebook_within_the_bounds_is_read(tmp_path):
    """A course notebook, and a 15 MB notebook of one string, are read; what is not JSON is a
    ValueError for the caller, never a hang or a crash of the scan."""
    from course_grading.authoring.nbformat_tools import read_untrusted

    for path in sorted((ROOT / "solutions").glob("*/*.ipynb")):
        data = path.read_bytes()
        assert untrusted.notebook_problem(data) == "", path
        assert read_untrusted(path).cells == read_untrusted(data=data).cells
    one_string = _notebook_text([_markdown(source='"' + "x" * (15 * 2**20) + '"')])
    assert len(read_untrusted(data=one_string, label="big").cells[0].source) == 15 * 2**20
    for text in (
        b"",
        b"\xff\xfe",
        b'{"cells": [',
        b'"unterminated \\"',
        b"]]]]]]]",
        b"[" * 10 + b"]" * 20,
        b'{"cells": {}}',
        b'{"nbformat": 99, "cells": []}',
    ):
        assert untrusted.notebook_problem(text) == "" or "more than" in untrusted.notebook_problem(text)
        with pytest.raises(ValueError):
            read_untrusted(data=text, label="x")
    assert (
        untrusted.json_bound(b'["[[[[", {"a": "]]]]"}]', 10, 10, 2) == ""
    )  # brackets in strings do not count
    assert untrusted.json_bound(b"[[[]]]", 10, 10, 2) == "nests JSON objects and arrays more than 2 deep"


def test_copy_tree_leaves_out_a_notebook_beyond_a_bound(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "ok.ipynb").write_bytes(_notebook_text([_markdown()]))
    (src / "bomb.ipynb").write_bytes(BOMBS["has more than 2000 cells"])
    (src / "bomb.json").write_bytes(BOMBS["has more than 2000 cells"])  # not a notebook: copied
    left = untrusted.copy_tree(src, tmp_path / "dst")
    assert [(item.path, item.reason) for item in left] == [("bomb.ipynb", "has more than 2000 cells")]
    assert sorted(p.name for p in (tmp_path / "dst").iterdir()) == ["bomb.json", "ok.ipynb"]


def test_plain_names_are_safe_ids():
    for name in (
        "ada",
        "ada.lovelace@uni.edu",
        "s-123_x",
        "01_embeddings",
        "out-test_one_hot.json",
        "A" * 64,
    ):
        assert untrusted.plain_name(name), name
    for name in (
        "",
        ".",
        "..",
        ".hidden",
        "-rf",
        "@ada",
        "@SUM(A1)",
        "a/b",
        "a\0b",
        "a b",
        "<script>",
        "a\u202eb",
        "bad\udcff",
        "caf\u00e9",
        "a\nb",
        "A" * 65,
        b"ada",
        None,
    ):
        assert not untrusted.plain_name(name), name
    assert untrusted.shown_name("bad\udcff") == "'bad\\xff'"
    assert untrusted.shown_name("a\u202eb") == "'a\\xe2\\x80\\xaeb'"
    assert untrusted.shown_name("x" * 500).endswith("x'...") and len(untrusted.shown_name("x" * 500)) < 140


def test_audit_outputs_are_parsed_within_bounds(tmp_path):
    """What the audit's child wrote: an .npy whose header claims more than its bytes, an array of
    objects, a JSON nested or numerous beyond its bounds: refused, naming why, nothing allocated
    for what a header claims."""
    import io

    import numpy as np

    from course_grading.audit.trusted import _Outputs

    def npy(array) -> bytes:
        buffer = io.BytesIO()
        np.save(buffer, array, allow_pickle=False)
        return buffer.getvalue()

    good = npy(np.arange(6.0).reshape(2, 3))
    (tmp_path / "out-a-0.npy").write_bytes(good)
    liar = good.replace(b"(2, 3)", b"(200000, 300000)")
    (tmp_path / "out-a-1.npy").write_bytes(liar)
    (tmp_path / "out-a-2.npy").write_bytes(good.replace(b"'<f8'", b"'|O8'"))
    (tmp_path / "out-a-3.npy").write_bytes(b"\x93NUMPY garbage")
    (tmp_path / "out-a.json").write_bytes(b'{"outputs": [' + b"[" * 1000 + b"]" * 1000 + b"]}")
    (tmp_path / "out-b.json").write_bytes(b'{"outputs": [' + b"{}," * 200_000 + b"{}]}")
    (tmp_path / "out-c.json").write_text(json.dumps({"outputs": [{"value": {"nd": "out-a-0.npy"}}]}))
    outputs = _Outputs(tmp_path)
    assert np.load(io.BytesIO(outputs.read("out-a-0.npy"))).shape == (2, 3)
    for name, why in (
        ("out-a-1.npy", "fewer or more bytes than its header says"),
        ("out-a-2.npy", "not of numbers or text"),
        ("out-a-3.npy", "is not an array file"),
    ):
        with pytest.raises(UntrustedFileError, match=re.escape(why)):
            outputs.read(name)
    with pytest.raises(UntrustedFileError, match="more than 32 deep"):
        outputs.load_json("out-a.json")
    with pytest.raises(UntrustedFileError, match="more than 100000 JSON objects"):
        outputs.load_json("out-b.json")
    assert outputs.load_json("out-c.json") == {"outputs": [{"value": {"nd": "out-a-0.npy"}}]}


def test_json_bound_counts_what_the_parser_builds():
    """On random JSON whose strings hold quotes, backslashes, brackets and commas, the scan's
    counts are the parser's: containers and depth exactly, values never fewer."""
    import random

    rng = random.Random(7)
    alphabet = ['"', "\\", "[", "]", "{", "}", ",", "a", " ", "\\\\", '\\"', "\u00e9"]

    def value(depth):
        kind = rng.randrange(5 if depth < 6 else 3)
        if kind == 0:
            return "".join(rng.choice(alphabet) for _ in range(rng.randrange(6)))
        if kind in (1, 2):
            return rng.choice([1, 2.5, None, True])
        if kind == 3:
            return [value(depth + 1) for _ in range(rng.randrange(4))]
        return {
            "".join(rng.choice(alphabet) for _ in range(3)): value(depth + 1) for _ in range(rng.randrange(4))
        }

    def measure(v, depth=0):
        if isinstance(v, (list, dict)):
            children = list(v.values()) if isinstance(v, dict) else v
            sub = [measure(c, depth + 1) for c in children]
            return (
                1 + sum(s[0] for s in sub),
                max([depth + 1] + [s[1] for s in sub]),
                1 + sum(s[2] for s in sub),
            )
        return 0, depth, 1

    for _ in range(300):
        v = value(0)
        text = json.dumps(v, ensure_ascii=rng.random() < 0.5).encode()
        containers, depth, values = measure(v)
        assert untrusted.json_bound(text, containers, 10**9, depth) == ""
        if containers:
            assert "objects and arrays" in untrusted.json_bound(text, containers - 1, 10**9, 10**9)
            assert "deep" in untrusted.json_bound(text, 10**9, 10**9, depth - 1)
        # values: counted from the commas, never fewer, at most one more per (empty) container
        assert "JSON values" in untrusted.json_bound(text, 10**9, values - 1, 10**9)
        assert untrusted.json_bound(text, 10**9, values + containers, 10**9) == ""


def test_find_submissions_refuses_folders_that_are_not_student_ids(tmp_path):
    """A student folder whose name is not UTF-8, or not a safe id, is one refused name (for one
    error row), never a (student, assignment) pair that would reach the gradebook."""
    from course_grading.course.course_dir import find_submissions

    submitted = tmp_path / "submitted"
    for name in (b"ada", b"bad\xff", b"<script>", b"ev\xe2\x80\xaeil", b"x" * 200, b"empty\x1b"):
        os.makedirs(
            os.path.join(bytes(submitted), name, b"01_embeddings" if name != b"empty\x1b" else b""),
            exist_ok=True,
        )
    os.makedirs(os.path.join(bytes(submitted), b"ben", b"bad\xffassignment"))
    refused = []
    pairs = find_submissions(submitted, refused=refused)
    assert pairs == [("ada", "01_embeddings"), ("ben", "bad\udcffassignment")]
    assert sorted(untrusted.shown_name(n) for n in refused) == sorted(
        [
            "'<script>'",
            "'bad\\xff'",
            "'ev\\xe2\\x80\\xaeil'",
            "'empty\\x1b'",
            "'" + "x" * untrusted.MAX_NAME + "'...",
        ]
    )
    refused = []
    assert find_submissions(submitted, assignments=["01_embeddings"], refused=refused) == [
        ("ada", "01_embeddings")
    ]
    assert len(refused) == 4  # the empty one holds no chosen assignment
    assert find_submissions(submitted) == pairs  # without a list: left out all the same


def test_course_check_refuses_a_notebook_beyond_a_bound(tmp_path):
    from course_grading.commands.check import load_submission
    from course_grading.errors import GradingError

    path = tmp_path / "01_embeddings.ipynb"
    path.write_bytes(BOMBS["nests JSON objects and arrays more than 64 deep"])
    with pytest.raises(GradingError, match="nests JSON objects and arrays more than 64 deep: not graded"):
        load_submission(path)


def test_notebook_bounds_come_from_the_configuration(tmp_path):
    from traitlets.config import Config

    config = Config()
    config.NotebookBounds.max_cells = 1
    bounds = untrusted.NotebookBounds.from_config(config)
    assert bounds.max_cells == 1 and bounds.max_containers == untrusted.NOTEBOOK_BOUNDS.max_containers
    assert untrusted.NotebookBounds.from_config(Config()) == untrusted.NOTEBOOK_BOUNDS
    src = tmp_path / "src"
    src.mkdir()
    (src / "two.ipynb").write_bytes(_notebook_text([_markdown()] * 2))
    left = untrusted.copy_tree(src, tmp_path / "dst", notebook_bounds=bounds)
    assert [(item.path, item.reason) for item in left] == [("two.ipynb", "has more than 1 cells")]


# Terminal control sequences, a forged log line, a bidi override and bytes that are not UTF-8,
# in the name of a file a student left in a submission: left out (a link, a FIFO, too big), the
# name reaches the instructor's terminal (the collect log, `course feedback`, `course autograde`)
HOSTILE_NAMES = [
    "x\x1b]0;owned\x07\x1b[2J",
    "x\n[CollectApp | INFO] Collecting submission: victim",
    "x\u202egnp.exe",
    "x\r\x1b[1A\x1b[2K",
    os.fsdecode(b"x\xff\x1b[31m"),
]


def test_a_left_out_name_is_shown_escaped(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in HOSTILE_NAMES:
        (src / name).symlink_to("/etc/hostname")
    left = untrusted.copy_tree(src, tmp_path / "dst")
    assert {item.path for item in left} == set(HOSTILE_NAMES)  # the real names, to compare with
    for item in left:
        for text in (str(item), item.shown):
            assert text.isprintable() and text.isascii(), repr(text)
        assert str(item).endswith(" is a symbolic link")
    assert "x\\x1b]0;owned\\x07\\x1b[2J is a symbolic link" in map(str, left)


def test_the_course_command_prints_an_error_as_one_escaped_line():
    from course_grading.commands.cli import _one_line

    for name in HOSTILE_NAMES:
        line = _one_line(ValueError(f"submitted/a/03/{name}: not graded"))
        assert line.isprintable() and line.startswith("submitted/a/03/x"), repr(line)
    assert _one_line(ValueError("a\nb")) == "a b"  # lines are still joined
    assert len(_one_line(ValueError("\x1b" * 5000))) == 1000
