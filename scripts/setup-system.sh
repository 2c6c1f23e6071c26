#!/bin/sh
# Installs the Debian packages innerloop needs when they are missing.
# graphviz provides the `dot` binary used for SVG/PNG diagrams.
set -eu
if command -v dot >/dev/null 2>&1; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then
    SUDO="sudo"
fi
if command -v apt-get >/dev/null 2>&1; then
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq graphviz >/dev/null
else
    echo "innerloop: install graphviz (Debian: apt-get install graphviz; macOS: brew install graphviz)" >&2
    exit 1
fi
