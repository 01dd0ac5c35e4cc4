#!/usr/bin/env bash
# Installs what is missing (test tools included), lints (ruff, configured in pyproject.toml),
# then runs the whole test suite. A lint finding fails the run before any test starts.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
.venv/bin/ruff check .
exec .venv/bin/python -m pytest "$@"
