# Shared by scripts/run and scripts/test: make sure .venv exists and holds this checkout
# installed (editable) with the given extras. Re-installs only when pyproject.toml changed.
# usage: . scripts/_venv.sh EXTRAS   (EXTRAS e.g. "test" or "")
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PY="${PYTHON:-python3}"
extras="${1:-}"
if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "fabricjobs needs Python 3.11 or newer")'
    echo "creating $VENV" >&2
    "$PY" -m venv "$VENV"
fi
stamp="$VENV/.fabricjobs-installed-${extras:-base}"
want="$(cat "$ROOT/pyproject.toml" | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    spec="$ROOT"
    [ -n "$extras" ] && spec="$ROOT[$extras]"
    echo "installing fabricjobs${extras:+[$extras]} into $VENV" >&2
    "$VENV/bin/python" -m pip install --disable-pip-version-check -q -e "$spec" >&2
    echo "$want" > "$stamp"
fi
