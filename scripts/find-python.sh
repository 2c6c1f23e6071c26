#!/bin/sh
# Prints the path of a working Python X.Y interpreter, for the venvs of the versions the
# package claims beyond .venv's (make test-py312, test-py313):
#   sh scripts/find-python.sh 3.13
# It tries python3.13 on PATH (a pyenv shim on PATH may exist without working: it is run to
# check), then pyenv's versions (pyenv root, or ~/.pyenv), newest patch release first.
set -eu
V="${1:-}"
case "$V" in
    3.[0-9] | 3.[0-9][0-9]) ;;
    *)
        echo "usage: sh scripts/find-python.sh 3.X (got '$V')" >&2
        exit 2
        ;;
esac
works() {
    "$1" -c "import sys; sys.exit(sys.version_info[:2] != tuple(map(int, '$V'.split('.'))))" \
        >/dev/null 2>&1
}
if command -v "python$V" >/dev/null 2>&1 && works "python$V"; then
    command -v "python$V"
    exit 0
fi
ROOT="$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")"
for candidate in $(ls -d "$ROOT"/versions/"$V".*/bin/python"$V" 2>/dev/null | sort -V -r); do
    if works "$candidate"; then
        echo "$candidate"
        exit 0
    fi
done
echo "Python $V is missing: the package claims it (pyproject.toml's classifiers) and make" \
    "test-py$(echo "$V" | tr -d .) tests it. Install it (e.g. pyenv install $V, or the" \
    "distribution's python$V package) so that python$V is on PATH or under $ROOT/versions." >&2
exit 1
