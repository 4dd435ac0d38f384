# Shared by scripts/run and scripts/test: make sure .venv exists and holds this checkout
# installed (editable) with the given extras. Re-installs only when pyproject.toml changed.
# usage: . scripts/_venv.sh EXTRAS   (EXTRAS e.g. "test" or "")
# FABRICJOBS_VENV names another venv directory (./scripts/test --quick: one per Python), made
# with $PYTHON (default python3).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${FABRICJOBS_VENV:-$ROOT/.venv}"
PY="${PYTHON:-python3}"
extras="${1:-}"
if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "fabricjobs needs Python 3.11 or newer")'
    echo "creating $VENV" >&2
    "$PY" -m venv "$VENV"
fi
want="$(sha256sum < "$ROOT/pyproject.toml" | cut -d' ' -f1)"
stamp="$VENV/.fabricjobs-installed-${extras:-base}"
# The test extras include everything the base install has.
have() { [ -f "$1" ] && [ "$(cat "$1")" = "$want" ]; }
if ! have "$stamp" && ! { [ -z "$extras" ] && have "$VENV/.fabricjobs-installed-test"; }; then
    spec="$ROOT"
    [ -n "$extras" ] && spec="$ROOT[$extras]"
    echo "installing fabricjobs${extras:+[$extras]} into $VENV" >&2
    "$VENV/bin/python" -m pip install --disable-pip-version-check -q -e "$spec" >&2
    echo "$want" > "$stamp"
fi
# Byte-compile the checkout (quick when up to date): with PYTHONDONTWRITEBYTECODE set, as on
# some machines, every command would otherwise compile fabricjobs from source at each start
# (~50 ms of the shell's cold start), which an installed package never does.
"$VENV/bin/python" -m compileall -q -j 0 "$ROOT/fabricjobs" >/dev/null 2>&1 || true
# A node refuses job directories, and job files, other users may write to
# (docs/guides/security.md). A clone made under a umask of 002 makes the project's own ones group-writable:
# take that back.
chmod -R go-w "$ROOT/examples/jobs" "$ROOT/examples/process_jobs" "$ROOT/tests/jobs" "$ROOT/tests/process" 2>/dev/null || true
