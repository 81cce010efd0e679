#!/usr/bin/env bash
# Install everything iomatrix needs on a Debian/Ubuntu host, idempotently:
# Debian packages, a Python virtualenv with iomatrix and its dependencies in
# .venv/, and the guest kernel + initramfs (cached under ~/.cache/iomatrix).
# Safe to run again: each step checks before it acts.
#
# Opt-in: `--fleet` (or IOMATRIX_FLEET=1) also installs the fleet controller, ansible-core (the `fleet` extra), the
# central store's driver psycopg (the `postgresql` extra) and Debian's postgresql (the tests' throw-away cluster),
# for ansible/sweep.yml and scripts/fleet-demo (docs/fleet.md), and the sshd the demo and the client-host tests
# run in their network namespaces. The swept hosts never need it.
#
# `--no-guest` skips building the guest kernel + initramfs; the first sweep with guests builds them then.
#
# `--real-guest` also builds the Debian 12 guest image (`iomatrix guest build debian`: mmdebstrap from the
# Debian archive this host's apt sources name, a few minutes and ~0.5 GB under the cache root; cached, rebuilt only
# when its inputs change; docs/guest.md). mmdebstrap itself is installed by every install but --minimal.
#
# `--minimal` (scripts/quickstart) installs only what the default plan `quick` needs (bare metal and QEMU's
# block layer: QEMU, fio, Python without the test tools) and builds no guest: on a fresh Debian 12 machine its
# apt step took 30 s instead of 110 s for everything (docs/benchmarks-history.md, "Issue 27: the six-minute first answer",
# "On a fresh Debian 12, apt included"). Running setup.sh without it later (scripts/test does) adds the rest.
#
# `--measure-only` (the fleet role's measure profile) is `--minimal` without matplotlib, which only the HTML report
# uses: a fleet host measures, the controller renders the report (docs/fleet.md;
# docs/benchmarks-history.md, "Issue 37: a fleet host's install, measuring-only against full").
#
# `--shared-storage` adds the servers and QEMU drivers of the shared-storage backings (iSCSI: tgt, libiscsi-bin;
# NFS: nfs-ganesha, nfs-ganesha-vfs, rpcbind, libnfs-utils; Ceph RBD: ceph-mon, ceph-osd, ceph-common;
# qemu-block-extra; NBD: nbdkit) to a --minimal install (a full one has them: the tests run a real tgtd, ganesha and Ceph).
# They are installed without starting or enabling the distribution's services: iomatrix starts its own daemons
# on 127.0.0.1 for a run and stops them after it
# (docs/backings.md, iSCSI, nfs and rbd).
#
# `--fio-binary=PATH` (with --measure-only; the fleet role passes it): use that fio, built on the controller from
# Debian's source without the engines a sweep never uses (src/iomatrix/fio/host_build.py), instead of Debian's fio
# package and its 87 MB of engine libraries. It is installed as .venv/bin/fio (iomatrix prefers it there) with
# its libraries from apt (libaio1, libnbd0); when those cannot be installed or it does not run here (another
# distribution release), Debian's fio is installed instead, and setup says why. apt does not update such a fio.
#
# `--help` prints this text.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"

fleet="${IOMATRIX_FLEET:-0}"
guest=1
real_guest=0
minimal=0
measure_only=0
fio_binary=""
shared=0
# --help prints the header comment above (the options and what each installs), refilled to 79 columns for a
# terminal, and does nothing else: it is read before the root check, so that anyone may read it.
usage() {
    echo "usage: scripts/setup.sh [--fleet] [--no-guest] [--real-guest] [--minimal]"
    echo "                        [--measure-only] [--shared-storage] [--fio-binary=PATH]"
    echo "                        [--help]"
    echo
    sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$here/scripts/setup.sh" | fmt -w 79
}
for arg in "$@"; do
    case "$arg" in
        -h|--help) usage; exit 0 ;;
        --fleet) fleet=1 ;;
        --shared-storage) shared=1 ;;
        --no-guest) guest=0 ;;
        --real-guest) real_guest=1 ;;
        --minimal) minimal=1; guest=0 ;;
        --measure-only) minimal=1; guest=0; measure_only=1 ;;
        --fio-binary=?*) fio_binary=${arg#--fio-binary=} ;;
        *) echo "setup.sh: unknown option '$arg' (the options are --fleet, --no-guest, --real-guest, --minimal, --measure-only, --shared-storage, --fio-binary=PATH and --help)" >&2; exit 2 ;;
    esac
done
if [ "$real_guest" = 1 ] && [ "$minimal" = 1 ]; then
    echo "setup.sh: --real-guest builds a guest image, which --minimal and --measure-only leave out; fix: drop one of them" >&2
    exit 2
fi
if [ -n "$fio_binary" ]; then
    if [ "$measure_only" = 0 ]; then
        echo "setup.sh: --fio-binary is for --measure-only installs (the others build the guest's fio from Debian's fio package); fix: add --measure-only or leave it out" >&2
        exit 2
    fi
    if [ ! -f "$fio_binary" ]; then
        echo "setup.sh: --fio-binary $fio_binary: no such file; fix: give the fio built on the controller (python -m iomatrix.fio.host_build)" >&2
        exit 2
    fi
fi
# charts: matplotlib, which the HTML report draws with (pyproject.toml). --minimal (the quickstart) writes a report;
# --measure-only (a fleet host of the role's measure profile) is --minimal without it: such a host only measures,
# the controller renders the report from the merged database.
extras=dev,charts
if [ "$minimal" = 1 ]; then extras=charts; fi
if [ "$measure_only" = 1 ]; then extras=; fi
if [ "$fleet" = 1 ]; then extras="${extras:+$extras,}fleet,postgresql"; fi

if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then exec sudo -E "$0" "$@"; fi
    echo "setup.sh: run as root (apt-get, loop devices, drop_caches need it)" >&2
    exit 2
fi

# Safe beside another setup.sh, and beside scripts/test (issue 69): what two runs would share is taken in turn. apt
# (and the policy-rc.d it writes) is the host's: one lock for the host. The .venv is this checkout's: one lock per
# checkout, so that the fleet demo's hosts (a checkout each) install side by side. The guest build's cache has a lock
# per entry of its own (src/iomatrix/guest/cache.py). A step waiting for another run's says so.
lock_dir=/run/lock
[ -d "$lock_dir" ] || lock_dir=/tmp
# take_lock FD FILE WHAT: hold FILE's lock on descriptor FD until it is closed (exec FD>&-) or setup exits.
take_lock() {
    eval "exec $1>\"\$2\""
    if ! flock -n "$1"; then
        echo "setup: waiting for another scripts/setup.sh on this host ($3, lock $2)"
        flock "$1"
    fi
}

# Why each package: qemu-system-x86/qemu-utils run guests and create images; qemu-system-common has
# qemu-storage-daemon (the block-layer tier runs the cell's graph in it, without a guest);
# fio is the workload on bare metal and (copied into the initramfs) in guests;
# e2fsprogs/xfsprogs/btrfs-progs make backing and guest filesystems;
# eatmydata is the host modifier axis; busybox-static, kmod (depmod), cpio and
# zstd/lz4 build the guest initramfs; build-essential, dpkg-dev, libaio-dev and zlib1g-dev build a static
# fio for the guest from Debian's source package (a 6 MB initramfs that boots ~1 s faster than copying the
# host fio and its libraries); python3-venv holds the Python dependencies.
# Checks of what iomatrix generates: libvirt-clients has virt-xml-validate (the configuration snippets' libvirt
# XML is validated against libvirt's own schema) and libxml2-utils its xmllint; virtinst's virt-install turns the
# virt-install snippets into a domain against libvirt's test driver (nothing defined or started), and its virt-xml
# makes --current's edit of a user's <disk> there; chromium loads
# the HTML report headless in the tests (no console errors, no network requests, a non-blank screenshot).
# mmdebstrap builds the Debian guest image (`iomatrix guest build debian`, --real-guest) from Debian packages;
# xorriso writes the NoCloud seed (a cidata ISO) a real guest reads its first-boot set-up from. extlinux and
# syslinux-common (its mbr.bin) make the tests' cloud-like image: the built Debian root in an MBR partition with a
# BIOS boot loader, so that a user's image booted through the firmware is tested (tests/test_real_guest.py).
packages=(python3 python3-venv python3-pip qemu-system-x86 qemu-system-common qemu-utils fio e2fsprogs xfsprogs btrfs-progs
          eatmydata busybox-static kmod cpio zstd lz4 gzip util-linux mount procps ca-certificates
          build-essential dpkg-dev libaio-dev zlib1g-dev
          libvirt-clients libxml2-utils virtinst chromium
          nbdkit mmdebstrap xorriso extlinux syslinux-common)
# What `--minimal` installs (the quickstart, and the fleet role's measuring install): what a plan without guests
# runs (fio on bare metal, qemu-storage-daemon and qemu-img for the block layer; the QEMU version every result
# records comes from qemu-storage-daemon when qemu-system-x86 is absent) and the Python venv (python3-venv brings
# pip into it; Debian's python3-pip is not needed). No qemu-system-x86 (a guest plan asks for `scripts/setup.sh`,
# which also builds the guest kernel): with python3-pip it was 71 MB of the 258 MB of packages (apt's
# Installed-Size) --minimal put on a fresh Debian 12.
minimal_packages=(python3 python3-venv qemu-system-common qemu-utils fio e2fsprogs
                  kmod util-linux mount procps ca-certificates)
if [ "$minimal" = 1 ]; then packages=("${minimal_packages[@]}"); fi
# With --fio-binary, Debian's fio only if the given one cannot serve (below); its libraries are installed apart, so
# that a release naming them otherwise (libaio1t64) falls back instead of failing the install.
fio_libraries=(libaio1 libnbd0)
if [ -n "$fio_binary" ]; then
    kept=()
    for p in "${packages[@]}"; do [ "$p" = fio ] || kept+=("$p"); done
    packages=("${kept[@]}")
fi
# Shared storage, iSCSI: tgt is the userspace target iomatrix starts (tgtd, tgtadm); qemu-block-extra holds QEMU's
# iscsi block driver (block-iscsi.so, a module qemu-system-* does not carry); libiscsi-bin has the initiator-side
# probes (iscsi-readcapacity16, iscsi-inq); targetcli-fb is the kernel LIO target's tool, whose own command signatures
# check the answers' targetcli lines (no LIO target is started). Their services are the distribution's, never
# started (see below).
iscsi_packages=(tgt libiscsi-bin qemu-block-extra targetcli-fb)
# --fleet: shellcheck, which ansible-test sanity runs on the collection's shell script (the role's install.sh);
# openssh-client and openssh-server, whose sshd the fleet demo and the client-host tests run in network namespaces
# of their own (the distribution's ssh service is not started, and disabled when installed here: see below).
# pkgconf and libnbd-dev: the fio the controller builds for measuring hosts (src/iomatrix/fio/host_build.py) with
# its nbd engine; the rest of that build (build-essential, dpkg-dev, libaio-dev, zlib1g-dev) is the full install's.
# postgresql and libpq5: the fleet's central store (docs/fleet.md): psycopg (the `postgresql` extra) talks through
# libpq5, and the tests start a throw-away cluster of Debian's server in a temporary directory (its packaged
# service is not started nor enabled here: see below).
if [ "$fleet" = 1 ]; then packages+=(shellcheck openssh-client openssh-server pkgconf libnbd-dev postgresql libpq5); fi
# Shared storage, NFS: the NFS backing's userspace server (nfs-ganesha with its VFS backend) and rpcbind (QEMU's
# libnfs finds the server through the portmapper), libnfs-utils (nfs-ls; libnfs itself removes iomatrix's files
# on an existing export), qemu-block-extra (QEMU's nfs/iscsi/rbd block drivers, block-nfs.so).
nfs_packages=(nfs-ganesha nfs-ganesha-vfs rpcbind libnfs-utils)
# Shared storage, Ceph RBD: the lab-started cluster's monitor and OSD daemons (ceph-mon with monmaptool, ceph-osd
# with BlueStore and memstore) and the ceph/rbd tools (ceph-common); QEMU's rbd driver is qemu-block-extra's
# block-rbd.so. About 200 MB installed; none of its services runs (the cluster is iomatrix's own, per run).
rbd_packages=(ceph-mon ceph-osd ceph-common)
# Shared storage, NBD: nbdkit serves the lab-started NBD backing's exports (QEMU's nbd driver is built in).
nbd_packages=(nbdkit)
# (each protocol's own list, src/iomatrix/protocols/*.py `packages`: tests/test_protocol_packages.py keeps these
# arrays equal to them)
if [ "$minimal" = 0 ] || [ "$shared" = 1 ]; then
    packages+=("${iscsi_packages[@]}" "${nfs_packages[@]}" "${rbd_packages[@]}" "${nbd_packages[@]}")
fi
# Units of those packages that apt would start and enable: a lab host keeps no NFS service of its own (a
# running one would be refused by the lab-started NFS backing, whose registration it holds), and no Ceph daemon
# (ceph-base comes with ceph-mon and ceph-osd and carries ceph.target and ceph-crash); an sshd installed for the
# fleet tests is theirs to start in their namespaces, not a service of the host; nor LIO's (targetcli-fb's units
# restore a saved LIO configuration at boot and serve targetcli's daemon).
declare -A shared_storage_unit_package=([nfs-ganesha.service]=nfs-ganesha [nfs-ganesha-lock.service]=nfs-ganesha
    [nfs-ganesha-config.service]=nfs-ganesha [rpcbind.service]=rpcbind [rpcbind.socket]=rpcbind [tgt.service]=tgt
    [ceph-mon.target]=ceph-mon [ceph-mon.service]=ceph-mon [ceph-osd.target]=ceph-osd [ceph.target]=ceph-base
    [ceph-crash.service]=ceph-base [rbdmap.service]=ceph-common [ssh.service]=openssh-server
    [ssh.socket]=openssh-server [postgresql.service]=postgresql [rtslib-fb-targetctl.service]=targetcli-fb
    [targetclid.service]=targetcli-fb [targetclid.socket]=targetcli-fb)
# apt_install PACKAGE...: install those not installed yet; prints "setup: installing N Debian packages" (the role
# reads a change from it) or nothing; the exit status is apt-get's.
apt_install() {
    local missing=() p unit status=0
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if [ "${#missing[@]}" -eq 0 ]; then return 0; fi
    take_lock 8 "$lock_dir/iomatrix-setup-apt.lock" "its apt-get"
    # (another run may have installed them while this one waited)
    local still=()
    for p in "${missing[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || still+=("$p")
    done
    if [ "${#still[@]}" -eq 0 ]; then exec 8>&-; return 0; fi
    missing=("${still[@]}")
    # The list wrapped to fit 100 columns, as every line iomatrix prints does.
    echo "setup: installing ${#missing[@]} Debian packages:"
    echo "${missing[*]}" | fold -s -w 96 | sed 's/^/  /'
    export DEBIAN_FRONTEND=noninteractive
    # No service of a package installed here may start (tgt's would take TCP 3260 and the control socket 0, an NFS
    # server or rpcbind of the distribution would hold the registration the lab-started NFS backing needs):
    # invoke-rc.d and deb-systemd-invoke ask /usr/sbin/policy-rc.d, and 101 means "action forbidden". Ours only
    # when the host has none (a container's own stays), and removed on every exit, failure included.
    local policy=/usr/sbin/policy-rc.d own_policy=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\n# written by iomatrix scripts/setup.sh during apt-get; removed after it\nexit 101\n' > "$policy"
        chmod 755 "$policy"
        own_policy=1
        trap 'rm -f /usr/sbin/policy-rc.d' EXIT
    fi
    # dpkg's own lock is waited for too (an unattended upgrade); the lock's descriptor is not handed to apt-get, so
    # that no process it leaves running could hold it
    local wait_dpkg=(-o DPkg::Lock::Timeout=600)
    if [ "$apt_updated" = 0 ]; then apt-get update -qq "${wait_dpkg[@]}" 8>&- && apt_updated=1 || status=$?; fi
    if [ "$status" = 0 ]; then
        apt-get install -y -qq --no-install-recommends "${wait_dpkg[@]}" "${missing[@]}" >/dev/null 8>&- || status=$?
    fi
    if [ "$own_policy" = 1 ]; then rm -f "$policy"; trap - EXIT; fi
    # Installing enables the units on a systemd host even when nothing starts them: disable those of the packages
    # installed just now (a service the administrator had before is left as it was).
    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
        for unit in "${!shared_storage_unit_package[@]}"; do
            for p in "${missing[@]}"; do
                if [ "$p" = "${shared_storage_unit_package[$unit]}" ]; then
                    systemctl disable --quiet --now "$unit" 2>/dev/null || true
                fi
            done
        done
    fi
    exec 8>&-
    return "$status"
}
apt_updated=0
apt_install "${packages[@]}"
if [ "$apt_updated" = 0 ]; then echo "setup: Debian packages present"; fi
# The controller's fio (--fio-binary): its libraries, then whether it runs here with the engines a sweep uses.
fio_debian=""
if [ -n "$fio_binary" ]; then
    if ! apt_install "${fio_libraries[@]}"; then
        fio_debian="apt-get could not install its libraries ${fio_libraries[*]}"
    elif ! engines=$("$fio_binary" --enghelp 2>&1); then
        fio_debian="it does not run here: $(echo "$engines" | tail -n 1)"
    elif ! echo "$engines" | grep -qx '[[:space:]]*nbd'; then
        fio_debian="it has no nbd engine"
    fi
    if [ -n "$fio_debian" ]; then
        echo "setup: the fio given with --fio-binary cannot serve here ($fio_debian): installing Debian's fio"
        apt_install fio
    fi
fi

# Python: a virtualenv beside the checkout. Prefer python3 on PATH when it is >= 3.11.
take_lock 9 "$lock_dir/iomatrix-setup-venv-$(printf '%s' "$here" | sha256sum | cut -c1-16).lock" "$here/.venv"
py="$(command -v python3)"
if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then py=/usr/bin/python3; fi
# The venv is made whole or not at all (issue 69): `python -m venv` (and the ensurepip it runs) builds it in
# .venv.new beside it, which is then renamed into place. A run killed in that step used to leave a .venv with a
# python and no pip, which every later run took for a venv and then failed on at `python -m pip`. The venv's
# scripts name the directory they were made in (pip's #! line, activate's VIRTUAL_ENV): the staging path in them
# is rewritten to .venv's before the rename (and its prompt is .venv's). A .venv left so by an older setup.sh (its
# python cannot import pip) is made again the same way. What a killed run staged is removed by the next (under the
# venv lock: no other run is staging). pip's own install into .venv below is the stamp's to guard: a run killed
# there leaves no stamp, so the next one installs again.
rm -rf .venv.new .venv.old
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
        || ! .venv/bin/python -c 'import pip' 2>/dev/null; then
    echo "setup: creating .venv with $py"
    "$py" -m venv "$here/.venv.new" --prompt .venv
    .venv.new/bin/python - "$here/.venv.new" "$here/.venv" <<'EOF'
import sys
from pathlib import Path

staged, final = (a.encode() for a in sys.argv[1:])
root = Path(sys.argv[1])
for f in [*(root / "bin").iterdir(), root / "pyvenv.cfg"]:
    if f.is_file() and not f.is_symlink() and staged in (text := f.read_bytes()):
        f.write_bytes(text.replace(staged, final))
EOF
    if [ -e .venv ] || [ -L .venv ]; then mv -T .venv .venv.old; fi
    mv -T .venv.new .venv
    rm -rf .venv.old
fi
# The stamp holds the extras installed (one per line): a --minimal venv gets the test tools when asked later. The
# project stamp holds the sha256 of what pip installs from pyproject.toml (its [project] and [build-system] tables:
# dependencies, extras, entry points), not its time: a checkout, merge or comment that leaves them as they were
# changes nothing, and tests running beside this never see pip replace the package under them (issue 69).
stamp=.venv/.iomatrix-installed
project_stamp=.venv/.iomatrix-project-sha256
project_sha=$(.venv/bin/python -c 'import hashlib, json, tomllib
d = tomllib.load(open("pyproject.toml", "rb"))
what = {k: d.get(k) for k in ("project", "build-system")}
print(hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest())')
# (a venv installed before the project stamp existed, its stamp newer than pyproject.toml, was installed from it)
if [ -f "$stamp" ] && [ ! -f "$project_stamp" ] && [ ! pyproject.toml -nt "$stamp" ]; then
    echo "$project_sha" > "$project_stamp"
fi
extras_missing=0
for e in ${extras//,/ }; do
    if [ ! -f "$stamp" ] || ! grep -qx "$e" "$stamp"; then extras_missing=1; fi
done
if [ ! -f "$stamp" ] || [ "$(cat "$project_stamp" 2>/dev/null)" != "$project_sha" ] \
        || ! .venv/bin/python -c 'import iomatrix' 2>/dev/null \
        || [ "$extras_missing" = 1 ] || { [ "$fleet" = 1 ] && [ ! -x .venv/bin/ansible-playbook ]; }; then
    echo "setup: installing iomatrix and its Python dependencies (${extras:-no extras}) into .venv"
    # The venv's own pip as it comes (Python >= 3.11 brings pip >= 22.3, which installs this pyproject editable):
    # upgrading it first cost every install a download and a few seconds, and hosts without an index a wheel more.
    # --measure-only: no bytecode compiled at install (pip --no-compile). A fleet host runs iomatrix as root, so the
    # first run writes the .pyc files of the modules it imports (under a second, once) and none is made for the
    # thousands of numpy/scipy modules a sweep never imports: ~4 s and ~50 MB less per host (docs/benchmarks-history.md,
    # "Issue 37: …", "With the controller's fio, no pip self-upgrade and no install-time bytecode").
    pip_options=()
    if [ "$measure_only" = 1 ]; then pip_options+=(--no-compile); fi
    .venv/bin/python -m pip install -q "${pip_options[@]}" -e ".${extras:+[$extras]}"
    # Extras installed before stay installed: keep them in the stamp with the new ones.
    { [ -f "$stamp" ] && cat "$stamp"; for e in ${extras//,/ }; do echo "$e"; done; } | sort -u > "$stamp.new"
    mv "$stamp.new" "$stamp"
    echo "$project_sha" > "$project_stamp.new"
    mv "$project_stamp.new" "$project_stamp"
else
    echo "setup: Python environment up to date"
fi
# The project's own bytecode: the editable install compiles none of src/ (pip compiles the wheel it builds, which
# holds only a path file), so wherever PYTHONDONTWRITEBYTECODE is set (container images often set it) or src/ is not
# writable, every command compiled the ~180 modules it imports at each start: 0.4-0.5 s of CPU of `recommend` on a
# 100-host store (docs/benchmarks-history.md, "Issue 52: the central PostgreSQL store"). compileall rewrites only what changed. --measure-only keeps none
# (pip --no-compile above; a measuring host's first run writes what it imports).
if [ "$measure_only" = 0 ]; then
    .venv/bin/python -m compileall -q src/iomatrix >/dev/null \
        || echo "setup: could not write the bytecode of src/iomatrix (each command compiles what it imports)"
fi

# The controller's fio beside iomatrix's interpreter (hostcmd.program_path prefers it there); replaced only when it
# changed, removed when Debian's serves instead.
if [ -n "$fio_binary" ] && [ -z "$fio_debian" ]; then
    if ! cmp -s "$fio_binary" .venv/bin/fio; then
        echo "setup: installing the fio given with --fio-binary as .venv/bin/fio ($("$fio_binary" --version))"
        install -m 0755 "$fio_binary" .venv/bin/fio.new
        mv .venv/bin/fio.new .venv/bin/fio
    fi
elif [ -e .venv/bin/fio ]; then
    echo "setup: removing .venv/bin/fio (Debian's fio serves this install)"
    rm -f .venv/bin/fio
fi

exec 9>&-  # the venv is done: the guest build below waits on its cache entries' own locks

# Guest kernel + initramfs with fio (cached; rebuilt only when versions change).
if [ "$guest" = 1 ]; then
    .venv/bin/iomatrix guest build
else
    if [ "$minimal" = 1 ]; then
        echo "setup: no guest kernel (--minimal); before a plan with guests: scripts/setup.sh"
    else
        echo "setup: guest kernel not built now (--no-guest): the first sweep with guests builds it"
    fi
fi
# The Debian guest image (cached under the cache root; this prints what is there when nothing changed).
if [ "$real_guest" = 1 ]; then
    .venv/bin/iomatrix guest build debian
fi
echo "setup: done"
