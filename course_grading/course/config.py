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
    return [Path(d) / name for d in folders if os.path.isabs(d) or not absolute_only for name in CONFIG_FILES
            if (Path(d) / name).is_file()]


def jupyter_server_config():
    """The Jupyter server's configuration (traitlets Config) in Jupyter's configuration folders,
    merged as Jupyter merges it (``course doctor --instructor`` reads the Formgrader's settings
    there)."""
    from jupyter_core.paths import jupyter_config_path
    from traitlets.config import Config
    from traitlets.config.loader import ConfigFileNotFound, JSONFileConfigLoader, PyFileConfigLoader

    merged = Config()
    for folder in reversed(jupyter_config_path()):  # the first folder wins: merged last
        names = [Path("jupyter_server_config.d", p.name)
                 for p in sorted(Path(folder, "jupyter_server_config.d").glob("*.json"))]
        names += [Path("jupyter_server_config.py"), Path("jupyter_server_config.json")]  # traitlets' order
        for name in names:
            loader = (PyFileConfigLoader if name.suffix == ".py" else JSONFileConfigLoader)(
                str(name), path=str(Path(folder, name.parent)))
            try:
                merged.merge(loader.load_config())
            except ConfigFileNotFound:
                continue
            except Exception:  # noqa: BLE001 - a broken file: the server would say so too
                continue
    return merged
