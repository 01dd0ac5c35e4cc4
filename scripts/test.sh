#!/usr/bin/env bash
# Installs what is missing (test tools included), lints and checks the layout (ruff, configured in
# pyproject.toml), then runs the whole test suite. A finding fails the run before any test starts.
# The suite runs in two pytest-xdist workers, each test file whole in one of them (its module
# fixtures made once): much of it waits on kernels, browsers and servers, so two workers keep
# both cores of a small machine busy. Arguments go to pytest after these (`-n 0`: one process).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
.venv/bin/ruff check .
.venv/bin/ruff format --check .
exec .venv/bin/python -m pytest -n 2 --dist loadfile "$@"
