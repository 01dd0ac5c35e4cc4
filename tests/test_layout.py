"""Rules of the packages' layout, read from the source: no private name crosses a package
(the hidden checks build on the public check kit, ``course_utils.checks.kit``), the sandbox
imports nothing of the audit, and no module is over MAX_LINES without a reason at its top."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("course_grading", "course_utils")


def _private(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__")


def _imports(path: Path, root: Path = ROOT):
    """(module of the file, line, dotted name imported) for each import of the two packages,
    relative ones resolved."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    package = parts[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = (
                (node.module or "").split(".")
                if node.level == 0
                else package[: len(package) - node.level + 1]
                + [p for p in (node.module or "").split(".") if p]
            )
            for alias in node.names:
                yield ".".join(package), node.lineno, [*base, alias.name]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield ".".join(package), node.lineno, alias.name.split(".")


def test_no_private_name_crosses_a_package():
    """``from a.b._c import x`` or ``from a.b import _x`` only from inside package ``a.b``."""
    crossing = []
    for top in PACKAGES:
        for path in sorted((ROOT / top).rglob("*.py")):
            for importer, line, name in _imports(path):
                if name[0] not in PACKAGES:
                    continue
                for i, part in enumerate(name):
                    if _private(part):
                        owner = name[:i] if (ROOT.joinpath(*name[:i])).is_dir() else name[: i - 1]
                        owner = ".".join(owner)
                        if importer != owner and not importer.startswith(owner + "."):
                            crossing.append(f"{path.relative_to(ROOT)}:{line}: {'.'.join(name)}")
                        break
    assert crossing == []


def test_the_kit_names_what_the_checks_use():
    from course_utils.checks import _core, _exercise, _recording, _seal, kit

    for name in kit.__all__:
        assert any(
            getattr(kit, name) is getattr(module, name, None)
            for module in (_core, _exercise, _recording, _seal)
        ), name


def _strings(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


def _audit_names(root: Path) -> list[str]:
    """Where a module of ``root``'s ``course_grading/sandbox`` imports ``course_grading.audit``,
    relatively or not, or names it in a string (an ``importlib`` name, a ``-m`` module)."""
    found = []
    for path in sorted((root / "course_grading" / "sandbox").rglob("*.py")):
        where = path.relative_to(root)
        found += [
            f"{where}:{line}: import {'.'.join(name)}"
            for _, line, name in _imports(path, root)
            if name[:2] == ["course_grading", "audit"]
        ]
        found += [
            f"{where}:{line}: names {text[:60]!r}"
            for line, text in _strings(ast.parse(path.read_text(encoding="utf-8")))
            if "course_grading.audit" in text
        ]
    return found


def test_the_sandbox_imports_nothing_of_the_audit():
    """The grader hands the audit's entry point to the sandbox (``sandbox.warm.hand_audit``)."""
    assert _audit_names(ROOT) == []


def test_the_audit_rule_sees_each_way_of_naming_it(tmp_path):
    folder = tmp_path / "course_grading" / "sandbox"
    folder.mkdir(parents=True)
    (folder / "a.py").write_text(
        "from ..audit import channel\n"
        "import course_grading.audit.child\n"
        "X = 'course_grading.audit.child:main'\n",
        encoding="utf-8",
    )
    where = "course_grading/sandbox/a.py"
    assert _audit_names(tmp_path) == [
        f"{where}:1: import course_grading.audit.channel",
        f"{where}:2: import course_grading.audit.child",
        f"{where}:3: names 'course_grading.audit.child:main'",
    ]


MAX_LINES = 500
SOURCES = ("course_grading", "course_utils", "tools", "scripts")


def _reason(path: Path) -> str:
    """The first line of the module's docstring when it says why the module is long: it
    starts "Over 500 lines: "."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    first = doc.splitlines()[0] if doc else ""
    return first if first.startswith(f"Over {MAX_LINES} lines: ") else ""


def test_no_module_is_over_500_lines_without_a_reason():
    long = []
    for top in SOURCES:
        for path in sorted((ROOT / top).rglob("*.py")):
            lines = len(path.read_text(encoding="utf-8").splitlines())
            if lines > MAX_LINES and not _reason(path):
                long.append(f"{path.relative_to(ROOT)}: {lines} lines")
    assert long == []
