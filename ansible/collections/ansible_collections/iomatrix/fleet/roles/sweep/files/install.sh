#!/bin/sh
# Install or update iomatrix from a source tarball, idempotently:
#   install.sh PROJECT_DIR TARBALL [WHEELHOUSE_TAR] [SETUP_OPTION ...]
# The SETUP_OPTIONs are given to scripts/setup.sh (empty ones left out): --measure-only for a host that only
# measures (the role's default), --shared-storage for a plan with iSCSI, NFS, Ceph RBD or NBD backings,
# --fio-binary=PATH for the fio built on the controller that the role copied.
#
# One install at a time per directory (a flock), because hosts that share a filesystem (containers, the
# fleet demo's namespaces) would otherwise unpack and pip-install into one .venv at once. The source is unpacked
# only when the tarball changed, and so are the wheels; scripts/setup.sh itself installs only what is missing.
# When setup.sh fails, what the failed install made and nothing can use is removed here, still under the lock (a
# host sharing the directory may install right after): a .venv iomatrix was never installed into, and the
# unpacked wheels (pip found them lacking, or they wait for an install that failed before pip). The source and the
# copied wheelhouse tar stay: the next run compares their checksums and unpacks what is needed. The role reports
# the failure in one line with its fix.
set -eu
dir=$1
tarball=$2
wheelhouse=${3:-}
if [ "$#" -ge 3 ]; then shift 3; else shift "$#"; fi
# The options left in "$@", empty ones dropped (the role passes '' for an option it does not use): the list of a
# for loop is taken once, so the kept ones can be appended while the originals are shifted away.
for option do
    shift
    if [ -n "$option" ]; then set -- "$@" "$option"; fi
done
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
status=0
"$dir/scripts/setup.sh" "$@" || status=$?
if [ "$status" -ne 0 ]; then
    # setup.sh writes its stamp only after pip installed iomatrix: without it the .venv holds nothing of ours.
    if [ -d "$dir/.venv" ] && [ ! -f "$dir/.venv/.iomatrix-installed" ]; then
        rm -rf "$dir/.venv"
        echo "iomatrix-install: removed the half-made .venv (the install failed)"
    fi
    if [ -n "$wheelhouse" ] && [ -d "$dir/.wheelhouse" ]; then
        rm -rf "$dir/.wheelhouse" "$dir/.wheelhouse.sha256"
        echo "iomatrix-install: removed the unpacked wheelhouse (the install failed)"
    fi
    exit "$status"
fi
