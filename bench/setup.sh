#!/usr/bin/env bash
# Create one virtualenv per benchmarked system under bench/.venvs/<system>,
# installed from PyPI (awa_django itself from this checkout, editable).
#
#   bash bench/setup.sh [SYSTEM ...]     # default: every system
#
# A system whose install fails is recorded in bench/.work/setup/<system>.err
# (the driver turns it into an error row) and the others still install.
set -u
BENCH="$(cd "$(dirname "$0")" && pwd)"
REPO="$(dirname "$BENCH")"
VENVS="$BENCH/.venvs"
LOGS="$BENCH/.work/setup"
mkdir -p "$VENVS" "$LOGS"

PY311="${PY311:-python3}"
# django-ox needs Python >= 3.12: the first 3.12+ interpreter that actually runs
# (a pyenv shim can exist and still refuse to run).
find_py312() {
  for candidate in python3.12 python3.13 /root/.pyenv/versions/3.12*/bin/python3.12 /usr/bin/python3.12; do
    if "$candidate" -c 'import sys; assert sys.version_info >= (3, 12)' >/dev/null 2>&1; then
      command -v "$candidate" || echo "$candidate"; return
    fi
  done
  echo python3.12
}
PY312="${PY312:-$(find_py312)}"
DJANGO='Django>=5.2,<5.3'

# system | interpreter | pip requirements
spec() {
  case "$1" in
    driver)          echo "$PY311|matplotlib psycopg[binary]" ;;
    awa)             echo "$PY311|-e $REPO $DJANGO django-environ" ;;
    procrastinate)   echo "$PY311|procrastinate psycopg[binary,pool]" ;;
    pgqueuer)        echo "$PY311|pgqueuer[asyncpg]" ;;
    django_tasks_db) echo "$PY311|django-tasks-db[compat] $DJANGO django-environ psycopg[binary]" ;;
    django_ox)       echo "$PY312|django-ox[backport] $DJANGO django-environ psycopg[binary]" ;;
    celery)          echo "$PY311|celery[redis]" ;;
    *) return 1 ;;
  esac
}

# Byte-compile what a system imports from this checkout, on every run (the
# code may have changed since the install): pip compiles a wheel's modules
# when it installs them, but an editable install's and the adapters' would
# otherwise be compiled again on every start where PYTHONDONTWRITEBYTECODE
# is set (70 ms of awa_worker's start-up on the bench machine), which no
# peer installed from a wheel pays.
compile_checkout() {
  local system="$1" venv="$2" log="$3"
  [ -x "$venv/bin/python" ] || return 0
  local targets=("$BENCH/systems")
  [ "$system" = awa ] && targets+=("$REPO/awa_django")
  "$venv/bin/python" -m compileall -q "${targets[@]}" >>"$log" 2>&1 \
    || echo "setup: $system: compileall failed (see $log)" >&2
}

SYSTEMS=("$@")
[ ${#SYSTEMS[@]} -eq 0 ] && SYSTEMS=(driver awa procrastinate pgqueuer django_tasks_db django_ox celery)

status=0
for system in "${SYSTEMS[@]}"; do
  if ! line="$(spec "$system")"; then echo "unknown system: $system" >&2; status=1; continue; fi
  python="${line%%|*}"; reqs="${line#*|}"
  venv="$VENVS/$system"; log="$LOGS/$system.log"; err="$LOGS/$system.err"
  # awa_django is installed from this checkout: its own dependencies count too.
  deps=""; [ "$system" = awa ] && deps="$(cat "$REPO/pyproject.toml")"
  stamp="$venv/.bench-installed-$(printf '%s\n%s' "$python $reqs" "$deps" | md5sum | cut -c1-8)"
  rm -f "$err"
  if [ -e "$stamp" ]; then
    echo "setup: $system up to date"; compile_checkout "$system" "$venv" "$log"; continue
  fi
  echo "setup: $system ($python: $reqs)"
  # shellcheck disable=SC2086  # $reqs is a word list on purpose
  if "$python" -c 'pass' >"$log" 2>&1 \
     && "$python" -m venv --clear "$venv" >"$log" 2>&1 \
     && "$venv/bin/python" -m pip install --quiet --upgrade pip >>"$log" 2>&1 \
     && "$venv/bin/python" -m pip install $reqs >>"$log" 2>&1; then
    touch "$stamp"
    compile_checkout "$system" "$venv" "$log"
  else
    { echo "install failed for $system ($python: $reqs)"; tail -n 5 "$log"; } >"$err"
    echo "setup: $system FAILED (see $log)" >&2
    status=1
  fi
done
exit $status
