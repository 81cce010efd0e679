#!/bin/sh
# Install or update iomatrix from a source tarball, idempotently: install.sh PROJECT_DIR TARBALL [WHEELHOUSE_TAR]
#
# One install at a time per directory (a flock), because hosts that share a filesystem (containers, the
# fleet demo's namespaces) would otherwise unpack and pip-install into one .venv at once. The source is unpacked
# only when the tarball changed, and so are the wheels; scripts/setup.sh itself installs only what is missing.
set -eu
dir=$1
tarball=$2
wheelhouse=${3:-}
exec 9>"$dir/.install.lock"
if ! flock -w 3600 9; then
    echo "install.sh: another install in $dir held its lock for an hour" >&2
    exit 1
fi
sum=$(sha256sum "$tarball" | cut -d' ' -f1)
if [ "$(cat "$dir/.source.sha256" 2>/dev/null || true)" != "$sum" ]; then
    rm -rf "$dir/src"  # modules a newer source no longer has must not linger
    tar -xzf "$tarball" -C "$dir"
    echo "$sum" >"$dir/.source.sha256"
    echo "iomatrix-install: changed: source unpacked ($sum)"
fi
if [ -n "$wheelhouse" ]; then
    sum=$(sha256sum "$wheelhouse" | cut -d' ' -f1)
    if [ "$(cat "$dir/.wheelhouse.sha256" 2>/dev/null || true)" != "$sum" ]; then
        rm -rf "$dir/.wheelhouse"
        mkdir "$dir/.wheelhouse"
        tar -xf "$wheelhouse" -C "$dir/.wheelhouse"
        echo "$sum" >"$dir/.wheelhouse.sha256"
        echo "iomatrix-install: changed: wheelhouse unpacked ($sum)"
    fi
    # No package index: pip takes everything from the copied wheels.
    export PIP_NO_INDEX=1 PIP_FIND_LINKS="$dir/.wheelhouse"
fi
"$dir/scripts/setup.sh"
