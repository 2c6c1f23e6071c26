#!/bin/sh
# Installs the Debian packages innerloop needs when they are missing.
#   sh scripts/setup-system.sh demo   what `make demo` needs: graphviz only
#   sh scripts/setup-system.sh dev    what `make test`, `make lint` and `make guard` need too
# graphviz provides the `dot` binary used for SVG/PNG diagrams (the demo's trace.svg).
# postgresql provides the server the durable (DBOS) and checkpoint tests start on a free port.
# bubblewrap provides `bwrap`, the sandbox of the run_shell and run_python tools.
# chromium and chromium-driver run the live web view's browser test (headless, via Selenium).
# valgrind counts the loop's instructions for the regression guard (make guard).
# g++ builds llama.cpp (scripts/setup-llama.sh), once per machine, for the real-model tests.
set -eu
WHAT="${1:-dev}"
case "$WHAT" in
    demo | dev) ;;
    *)
        echo "usage: sh scripts/setup-system.sh [demo|dev] (got '$WHAT')" >&2
        exit 2
        ;;
esac
MISSING=""
if ! command -v dot >/dev/null 2>&1; then
    MISSING="$MISSING graphviz"
fi
if [ "$WHAT" = dev ]; then
    if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 && ! command -v postgres >/dev/null 2>&1; then
        MISSING="$MISSING postgresql"
    fi
    if ! command -v bwrap >/dev/null 2>&1; then
        MISSING="$MISSING bubblewrap"
    fi
    if ! command -v chromium >/dev/null 2>&1; then
        MISSING="$MISSING chromium"
    fi
    if ! command -v chromedriver >/dev/null 2>&1; then
        MISSING="$MISSING chromium-driver"
    fi
    if ! command -v valgrind >/dev/null 2>&1; then
        MISSING="$MISSING valgrind"
    fi
    if ! command -v g++ >/dev/null 2>&1; then
        MISSING="$MISSING g++"
    fi
fi
if [ -z "$MISSING" ]; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then
    SUDO="sudo"
fi
if command -v apt-get >/dev/null 2>&1; then
    $SUDO apt-get update -qq
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $MISSING >/dev/null
else
    echo "innerloop: install$MISSING (Debian: apt-get install$MISSING; macOS: brew install$MISSING)" >&2
    exit 1
fi
