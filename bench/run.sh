#!/usr/bin/env bash
# The peer benchmark in one command (see bench/README.md):
#
#   bash bench/run.sh            # full run: N=20,000, W3 30 s, W4 60 s -> bench/results/
#   bash bench/run.sh --quick    # smoke test: N=500 -> bench/.work/quick-results/
#
# Creates/refreshes one virtualenv per system (setup.sh; a system that fails
# to install becomes an error row), then runs the driver (bench/compare/,
# `python -m bench.compare`) with the driver venv.  Extra arguments go to the
# driver (--systems, --n, --w4-rate, ...).
set -u
BENCH="$(cd "$(dirname "$0")" && pwd)"
bash "$BENCH/setup.sh" || echo "run.sh: some systems did not install; they get an error row" >&2
if [ ! -x "$BENCH/.venvs/driver/bin/python" ]; then
  echo "run.sh: the driver virtualenv failed to install (see $BENCH/.work/setup/driver.log)" >&2
  exit 1
fi
# The repository root on the path for `-m` (the driver strips PYTHONPATH from
# the adapters' environment), without changing the caller's directory.
PYTHONPATH="$(dirname "$BENCH")${PYTHONPATH:+:$PYTHONPATH}" \
  exec "$BENCH/.venvs/driver/bin/python" -m bench.compare "$@"
