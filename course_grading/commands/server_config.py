"""The Jupyter server's settings that the course's fixes write, where they win: the
``jupyter_server_config.json`` of the first writable folder of Jupyter's configuration path
(the first folder wins; the environment's in a virtual environment, else the user's; in a
folder, the JSON file is read after the Python one), what else that file holds kept.

``jupyter server extension enable`` is not enough: it writes a ``jupyter_server_config.d``
file, which loses to an extension named in any folder's ``jupyter_server_config.json`` or
``.py`` (a user's ``false`` there keeps it off).

    python -m course_grading.commands.server_config enable NAME...
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

USAGE = "usage: python -m course_grading.commands.server_config enable SERVER_EXTENSION..."


def command(*names: str) -> str:
    """The command line that enables server extensions ``names``."""
    return " ".join([sys.executable, "-m", __name__, "enable", *names])


def update(change: Callable[[dict], None], folder=None) -> Path:
    """``change`` the ``ServerApp`` section of the winning ``jupyter_server_config.json``."""
    from jupyter_core.paths import jupyter_config_path

    path = Path(folder or _first_writable(jupyter_config_path()), "jupyter_server_config.json")
    data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    change(data.setdefault("ServerApp", {}))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return path


def enable(names, folder=None) -> Path:
    return update(
        lambda server: server.setdefault("jpserver_extensions", {}).update({name: True for name in names}),
        folder,
    )


def _first_writable(folders: list[str]) -> str:
    for folder in folders:
        existing = next(p for p in (Path(folder), *Path(folder).parents) if p.exists())
        if os.path.isabs(folder) and os.access(existing, os.W_OK):
            return folder
    raise SystemExit(
        "course: error: no folder of Jupyter's configuration path is writable: "
        "set JUPYTER_CONFIG_DIR to one and run this again"
    )


def json_only(settings) -> dict:
    """The settings a JSON file can hold (a Python configuration may set others)."""
    kept = {}
    for key, value in dict(settings).items():
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            continue
        kept[str(key)] = value
    return kept


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] != "enable":
        sys.exit(USAGE)
    print(f"wrote {enable(sys.argv[2:])}")
