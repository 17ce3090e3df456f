#!/usr/bin/env bash
# The peer benchmark in one command (see bench/README.md):
#
#   bash bench/run.sh            # full run: N=20,000, W3 20 s, W4 60 s -> bench/results/
#   bash bench/run.sh --quick    # smoke test: N=500 -> bench/.work/quick-results/
#
# Creates/refreshes one virtualenv per system (setup.sh; a system that fails
# to install becomes an error row), then runs compare.py with the driver venv.
# Extra arguments go to compare.py (--systems, --n, --w4-rate, ...).
set -u
BENCH="$(cd "$(dirname "$0")" && pwd)"
bash "$BENCH/setup.sh" || echo "run.sh: some systems did not install; they get an error row" >&2
if [ ! -x "$BENCH/.venvs/driver/bin/python" ]; then
  echo "run.sh: the driver virtualenv failed to install (see $BENCH/.work/setup/driver.log)" >&2
  exit 1
fi
exec "$BENCH/.venvs/driver/bin/python" "$BENCH/compare.py" "$@"
