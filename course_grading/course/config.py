"""The one reader of nbgrader configuration files: the course's own ``nbgrader_config.py``
(``course.Course.config`` reads it once) and the instructor's, in Jupyter's configuration
folders (``~/.jupyter``, the environment's, the system's), which may name the course root and
the folders a sandbox must hide. A configuration file runs as Python: only these are read,
never one found in the current folder. Loads traitlets only."""

from __future__ import annotations

import os
from pathlib import Path

CONFIG_FILES = ("nbgrader_config.py", "nbgrader_config.json")


def load(path):
    """The traitlets config of one configuration file (Python or JSON); whatever reading it
    raises passes on."""
    from traitlets.config.loader import JSONFileConfigLoader, PyFileConfigLoader

    path = Path(path)
    loader = PyFileConfigLoader if path.suffix == ".py" else JSONFileConfigLoader
    return loader(path.name, path=str(path.parent)).load_config()


def jupyter_config_files(absolute_only: bool = True) -> list[Path]:
    """The nbgrader configuration files of Jupyter's configuration folders, in the order
    Jupyter reads them (the user's folder first); relative or empty entries (of
    ``JUPYTER_CONFIG_PATH``) are skipped when ``absolute_only``."""
    try:
        from jupyter_core.paths import jupyter_config_path

        folders = jupyter_config_path()
    except Exception:  # noqa: BLE001 - without jupyter_core there are none to read
        return []
    return [
        Path(d) / name
        for d in folders
        if os.path.isabs(d) or not absolute_only
        for name in CONFIG_FILES
        if (Path(d) / name).is_file()
    ]


def jupyter_server_config():
    """The Jupyter server's configuration (traitlets Config) in Jupyter's configuration folders,
    merged as the server merges it (``course doctor`` reads the server extensions and the
    Formgrader's settings there): of each folder its ``jupyter_server_config.py``, then
    ``.json``, the first folder winning as a whole section; the server extensions enabled, one
    by one, also from ``jupyter_server_config.d/*.json`` (what ``jupyter server extension
    enable`` writes), where the files loaded as a whole name none."""
    from jupyter_core.paths import jupyter_config_path
    from traitlets.config import Config

    merged, from_d = Config(), {}
    for folder in reversed(jupyter_config_path()):  # the first folder wins: merged last
        for path in [
            *sorted(Path(folder, "jupyter_server_config.d").glob("*.json")),
            Path(folder, "jupyter_server_config.json"),
        ]:
            from_d.update(_extensions(path))
        for name in ("jupyter_server_config.py", "jupyter_server_config.json"):  # traitlets' order
            try:
                merged.merge(load(Path(folder, name)))
            except Exception:  # noqa: BLE001 - absent, or broken: the server would say so too
                continue
    named = merged.ServerApp.get("jpserver_extensions", {}) if "ServerApp" in merged else {}
    merged.ServerApp.jpserver_extensions = {**from_d, **dict(named or {})}
    return merged


def _extensions(path: Path) -> dict:
    try:
        found = load(path).ServerApp.get("jpserver_extensions", {})
    except Exception:  # noqa: BLE001 - a broken file: the server would say so too
        return {}
    return dict(found) if isinstance(found, dict) else {}
