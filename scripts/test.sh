#!/usr/bin/env bash
# Installs what is missing (test tools included), then runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
exec .venv/bin/python -m pytest "$@"
