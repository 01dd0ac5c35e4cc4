"""Reading files someone else wrote: no link followed, no wait on a FIFO, regular files only,
size caps; copying a submission that way; the audit reading back what its sandbox wrote."""
from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path

import pytest

from course_grading import untrusted
from course_grading.untrusted import UntrustedFileError

ROOT = Path(__file__).resolve().parents[1]


def _within(seconds: float, fn, *args):
    """``fn(*args)`` run in a thread that must finish within ``seconds`` (no hang)."""
    box = {}

    def target():
        try:
            box["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001
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
    for name, why in (("link", "is a symbolic link"), ("dangling", "is a symbolic link"),
                      ("fifo", "is a named pipe (FIFO)"), ("folder", "is a folder")):
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
        "nb.ipynb", "sub", "sub/data.csv", "sub/deeper", "sub/deeper/x.txt"]
    assert {(item.path, item.reason) for item in left} == {
        ("big.bin", "is over 1000 bytes"), ("link.txt", "is a symbolic link"),
        ("pipe", "is a named pipe (FIFO)"), ("sub/linked_dir", "is a symbolic link")}
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
        from course_grading.audit import child
        child.main(str(folder))  # the real child, in-process; then the files are tampered with
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
    assert verdicts["test_one_hot"].reason == "unreadable output: out-test_one_hot.json is a named pipe (FIFO)"
    assert not verdicts["test_embed"].agrees and "is a symbolic link" in verdicts["test_embed"].reason
    assert verdicts["test_encode"].agrees  # the untouched exercise is judged as usual
