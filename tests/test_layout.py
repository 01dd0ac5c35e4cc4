"""Rules of the packages' layout, read from the source: no private name crosses a package
(the hidden checks build on the public check kit, ``course_utils.checks.kit``)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("course_grading", "course_utils")


def _private(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__")


def _imports(path: Path):
    """(module of the file, line, dotted name imported) for each import of the two packages,
    relative ones resolved."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    package = parts[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = (node.module or "").split(".") if node.level == 0 else \
                package[:len(package) - node.level + 1] + [p for p in (node.module or "").split(".") if p]
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
                        owner = name[:i] if (ROOT.joinpath(*name[:i])).is_dir() else name[:i - 1]
                        owner = ".".join(owner)
                        if importer != owner and not importer.startswith(owner + "."):
                            crossing.append(f"{path.relative_to(ROOT)}:{line}: {'.'.join(name)}")
                        break
    assert crossing == []


def test_the_kit_names_what_the_checks_use():
    from course_utils.checks import _core, _seal, kit

    for name in kit.__all__:
        assert getattr(kit, name) is getattr(_core, name, None) or getattr(kit, name) is getattr(_seal, name)
