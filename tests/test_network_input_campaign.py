"""A generated campaign of bad network-backing inputs (issue 50): iSCSI, NFS and Ceph RBD backings,
their client hosts, and the iSCSI LUNs handed over with --allow-destroy, given the most weight of
every kind of mistake.

Every case is a mistake and must end as tests/test_bad_input_campaign.py's cases do (its `check`):
exit status 2, exactly one "error:" line on stderr, no traceback, no crash log, nothing written in
the case's directory, the current directory or $HOME. A plan whose mistake is in a field goes
through `plan` and `run`; a plan that is valid but names a server that cannot serve goes through
`run` only (`plan` previews it and says it is checked only when run).

Where a case reaches for a server, the server is a closed port on 127.0.0.1 (bound, then closed
again) and every host is written as an address, so no name is looked up and no packet leaves this
host. The damaged-database campaign is tests/test_fuzz.py, the general bad-input campaign
tests/test_bad_input_campaign.py."""

from __future__ import annotations

import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from iomatrix.domain.clients import CLIENTS_MAX
from iomatrix.protocols.iscsi import MAX_LUN
from iomatrix.store import Store
from tests.test_bad_input_campaign import Case, check
from tests.test_merge import make_sweep


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again on leaving: nothing listens there


CLOSED = _closed_port()
IQN = "iqn.2026-11.org.example:campaign"
CEPH_CONF = (
    f"[global]\nmon host = v1:127.0.0.1:{CLOSED}\nauth client required = none\n"
    "client mount timeout = 5\n"
)

# A small plan around one backing table: a case that is wrongly accepted measures for seconds, not
# minutes.
HEAD = (
    'tier = ["blocklayer"]\nformat = ["raw"]\nworkloads = ["rand-write-4k"]\nruntime = '
    '1\nsize = "4M"\n'
    'time_budget = "1m"\nnull_ceiling = false\n\n[repetitions]\nmin = 1\nmax = 1\n\n'
)

# Each protocol's existing-server table, key by key (TOML values as written): a case replaces, drops
# or adds one.
EXISTING: dict[str, dict[str, str]] = {
    "iscsi": {"portal": f'"127.0.0.1:{CLOSED}"', "iqn": f'"{IQN}"', "lun": "1"},
    "nfs": {"server": '"127.0.0.1"', "export": '"/iomatrix-campaign-nowhere"'},
    "rbd": {"conf": '"{case}/ceph.conf"', "pool": '"vms"'},
}
FILES = (("ceph.conf", CEPH_CONF),)

# Values of the wrong type for any key: a number, a list, a table, a boolean, a date, a float; for a
# number key, text instead of the number.
WRONG_TYPES = ("3", '["a"]', "{ a = 1 }", "true", "1979-05-27", "1.5")
NUMBER_KEYS = {"lun", "port"}
WRONG_FOR_NUMBERS = ('"1"', '["a"]', "{ a = 1 }", "true", "1979-05-27", "1.5")
# Text that is never a valid value of these keys.
BAD_TEXT = ('""', '" "', '"a\\u001b[2Jb"', '"a\\u0000b"', '"' + "x" * 5000 + '"', '"a,b"', '"a b"')

# Values each key refuses (TOML as written), beyond WRONG_TYPES and BAD_TEXT.
BAD_VALUES: dict[str, dict[str, tuple[str, ...]]] = {
    "iscsi": {
        "portal": (
            '"127.0.0.1"',
            '":3260"',
            '"127.0.0.1:0"',
            '"127.0.0.1:65536"',
            '"127.0.0.1:-1"',
            '"999.1.1.1:3260"',
            '"10.0.0:3260"',
            '"[::1:3260"',
            '"[1::2::3]:3260"',
            '"iscsi://127.0.0.1"',
            '"127.0.0.1:3260,file.driver=file"',
            '"127.0.0.1:3260/iqn.x"',
            '"127.0.0.1:abc"',
            '"user@127.0.0.1:3260"',
            '"127.0.0.1:3260:3260"',
        ),
        "iqn": (
            '"iqn"',
            '"iqn.2026-11"',
            '"eui.12"',
            '"naa.xyz"',
            '"iqn.2026-11.org.example:a b"',
            '"iqn.2026-11.org.example:x,y"',
            '"IQN 2026"',
            '"iqn.' + "a" * 230 + '"',
            '"target0"',
            '"iqn.2026-11.org.example:x/1"',
        ),
        "lun": ("-1", str(MAX_LUN + 1), "99999999999", '"1"', "inf", "nan"),
    },
    "nfs": {
        "server": (
            '"nfs://127.0.0.1"',
            '"127.0.0.1:/srv"',
            '"999.1.1.1"',
            '"10.0.0"',
            '"1::2::3"',
            '"-leading-dash"',
            '"' + "h" * 300 + '"',
            '"127.0.0.1:2049"',
            '"user@127.0.0.1"',
        ),
        "export": (
            '"srv"',
            '"/srv,file.driver=file"',
            '"/srv/../etc"',
            '"/srv?x=1"',
            '"//srv"',
            '"/srv#a"',
            '"/srv%20x"',
            '"/s v"',
            '"/' + "e" * 1100 + '"',
            '"~/srv"',
        ),
    },
    "rbd": {
        "conf": (
            '"ceph.conf"',
            '"/etc/ceph/a b.conf"',
            '"/etc/ceph/a:b.conf"',
            '"/etc/ceph/a,b.conf"',
        ),
        "pool": ('"a/b"', '"a:b"', '"' + "p" * 200 + '"', '"a@b"', '"a;b"'),
        # any store with an existing cluster is refused
        "store": ('"filestore"', '"bluestore"', '"memstore"'),
        "keyring": ('"keyring"', '"/etc/ceph/a:b.keyring"'),
        "user": ('"client.admin:x"', '"a b"', '"a/b"'),
    },
}
# Keys that belong to another protocol, or to no backing, on each protocol's table.
FOREIGN_KEYS = {
    "iscsi": ('export = "/srv"', 'pool = "vms"', 'portl = "127.0.0.1:3260"', 'size = "1G"'),
    "nfs": (
        'iqn = "' + IQN + '"',
        'conf = "/etc/ceph/ceph.conf"',
        'exprot = "/srv"',
        'fs = "ext4"',
    ),
    "rbd": ('portal = "127.0.0.1:3260"', 'export = "/srv"', 'poool = "vms"', 'device = "/dev/sda"'),
}
# Keys that must come together, dropped one at a time; and lab-only or existing-only keys on the
# wrong kind.
LONELY: dict[str, tuple[str, ...]] = {
    "iscsi": ('portal = "127.0.0.1:3260"', f'iqn = "{IQN}"', "lun = 1", f'iqn = "{IQN}"\nlun = 1'),
    "nfs": ('server = "127.0.0.1"', 'export = "/srv"'),
    "rbd": (
        'conf = "/etc/ceph/ceph.conf"',
        'pool = "vms"',
        'keyring = "/etc/ceph/k"',
        'user = "admin"',
        'store = "memstore"\nuser = "admin"',
    ),
}

# One client host's keys (TOML as written), and their refused values.
CLIENT_BASE = {"ssh": '"root@127.0.0.1"', "address": '"127.0.0.1"', "port": "8765"}
CLIENT_BAD: dict[str, tuple[str, ...]] = {
    "ssh": (
        '""',
        '"root@"',
        '"a b"',
        '"root@999.1.1.1"',
        '"root@10.0.0"',
        '"-oProxyCommand=x"',
        '"@127.0.0.1"',
        '"root@127.0.0.1:22"',
        '"root@host;id"',
        "22",
        "[1]",
    ),
    "address": (
        '"999.1.1.1"',
        '"1.2.3"',
        '"127.0.0.1:8765"',
        '"a b"',
        '""',
        '"-x"',
        '"1::2::3"',
        "7",
        "true",
    ),
    "port": ("0", "-1", "65536"),
    "ssh_config": ('"ssh_config"', '"relative/ssh_config"', "3", '""'),
    "sshh": ('"root@127.0.0.1"',),
}

# iSCSI LUNs handed over with --allow-destroy that are not LUN URLs (with a valid iSCSI backing
# plan).
ALLOW_DESTROY = (
    "iscsi://",
    "iscsi:///",
    "iscsi://127.0.0.1",
    f"iscsi://127.0.0.1/{IQN}",
    f"iscsi://127.0.0.1:0/{IQN}/1",
    f"iscsi://127.0.0.1:99999/{IQN}/1",
    f"iscsi://127.0.0.1/{IQN}/-1",
    f"iscsi://127.0.0.1/{IQN}/abc",
    f"iscsi://127.0.0.1/{IQN}/{MAX_LUN + 1}",
    f"iscsi://user:secret@127.0.0.1/{IQN}/1",
    f"iscsi://127.0.0.1/{IQN}/1?x=1",
    f"iscsi://127.0.0.1/{IQN}/1#frag",
    "iscsi://127.0.0.1/not-an-iqn/1",
    f"iscsi://999.1.1.1/{IQN}/1",
    "iscsi://127.0.0.1/%00/1",
    f"ISCSI://127.0.0.1/{IQN}/1/2",
)


def shown(value: str, width: int = 40) -> str:
    """A value as a case's name shows it: cut at `width`, with its length when cut (names must stay
    unique)."""
    return value if len(value) <= width else f"{value[:width]}…({len(value)} chars)"


def table(protocol: str, keys: dict[str, str], extra: str = "") -> str:
    body = "".join(f"{k} = {v}\n" for k, v in keys.items())
    return f'{HEAD}[[backing]]\ntype = "{protocol}"\n{body}{extra}'


def _field_plans() -> Iterator[tuple[str, str]]:
    """(name, plan text) for every plan refused for what a field says: `plan` and `run` both refuse
    it."""
    for protocol, base in EXISTING.items():
        for key in base:
            wrong = WRONG_FOR_NUMBERS if key in NUMBER_KEYS else (*WRONG_TYPES, *BAD_TEXT)
            values = (*wrong, *BAD_VALUES[protocol].get(key, ()))
            for v in dict.fromkeys(values):
                yield f"{protocol} {key} = {shown(v)}", table(protocol, {**base, key: v})
        for key, values in BAD_VALUES[protocol].items():
            if key in base:
                continue
            for v in (*WRONG_TYPES, *values):
                yield f"{protocol} {key} = {shown(v)}", table(protocol, {**base, key: v})
        for extra in FOREIGN_KEYS[protocol]:
            yield f"{protocol} with {extra.split(' ', 1)[0]}", table(protocol, base, extra + "\n")
        for alone in LONELY[protocol]:
            yield (
                f"{protocol} only {shown(alone.replace(chr(10), ' and '))}",
                table(protocol, {}, alone + "\n"),
            )
        yield f"{protocol} name too long", table(protocol, {**base, "name": '"' + "n" * 300 + '"'})
        yield f"{protocol} name with an escape", table(protocol, {**base, "name": '"a\\u001b[2Jb"'})
        yield (
            f"{protocol} client_host not a table",
            table(protocol, {**base, "client_host": '"root@127.0.0.1"'}),
        )
    yield from _client_host_plans()


def _client(keys: dict[str, str]) -> str:
    return "\n[[backing.client_host]]\n" + "".join(f"{k} = {v}\n" for k, v in keys.items())


def _client_host_plans() -> Iterator[tuple[str, str]]:
    # Client hosts on each protocol's existing server (the iSCSI one carries the value-by-value
    # cases).
    for key, values in CLIENT_BAD.items():
        for v in (*values, *(WRONG_FOR_NUMBERS if key in NUMBER_KEYS else ())):
            keys = {**CLIENT_BASE, key: v}
            yield (
                f"iscsi client_host {key} = {shown(v)}",
                table("iscsi", EXISTING["iscsi"], _client(keys)),
            )
    for protocol, base in EXISTING.items():
        yield (
            f"{protocol} lab-started with a client host",
            table(protocol, {}, _client(CLIENT_BASE)),
        )
        yield (
            f"{protocol} two client hosts at one fio server",
            table(
                protocol,
                base,
                _client(CLIENT_BASE) + _client({**CLIENT_BASE, "ssh": '"root@127.0.0.2"'}),
            ),
        )
        yield (
            f"{protocol} more than {CLIENTS_MAX} client hosts",
            table(
                protocol,
                base,
                "".join(
                    _client({"ssh": f'"root@127.0.0.{i + 1}"', "port": str(8000 + i)})
                    for i in range(CLIENTS_MAX + 1)
                ),
            ),
        )
        yield (
            f"{protocol} client host without ssh",
            table(protocol, base, _client({"address": '"127.0.0.1"'})),
        )


def _serving_plans() -> Iterator[tuple[str, str, tuple[str, ...]]]:
    """(name, plan text, --allow-destroy URLs) for valid plans whose server cannot serve: only `run`
    acts on them."""
    url = f"iscsi://127.0.0.1:{CLOSED}/{IQN}/1"
    iscsi = EXISTING["iscsi"]
    yield "iscsi portal closed, LUN handed over", table("iscsi", iscsi), (url,)
    yield "iscsi portal closed, LUN not handed over", table("iscsi", iscsi), ()
    yield "iscsi portal closed, another LUN handed over", table("iscsi", iscsi), (url[:-1] + "2",)
    no_lun = {k: v for k, v in iscsi.items() if k != "lun"}
    yield "iscsi LUN 0 by default, LUN 1 handed over", table("iscsi", no_lun), (url,)
    yield (
        "iscsi portal closed, with a client host",
        table("iscsi", iscsi, _client(CLIENT_BASE)),
        (url,),
    )
    yield "rbd monitor closed", table("rbd", EXISTING["rbd"]), ()
    # Files an existing cluster needs that are not there: `plan` previews the backing as pruned with
    # the reason.
    for key, value in (
        ("conf", "{case}/no/such/ceph.conf"),
        ("conf", "{case}"),
        ("keyring", "{case}/no.keyring"),
    ):
        yield f"rbd {key} = {value}", table("rbd", {**EXISTING["rbd"], key: f'"{value}"'}), ()
    if shutil.which("rpcinfo") is not None:
        yield "nfs export nowhere", table("nfs", EXISTING["nfs"]), ()


def _cases() -> Iterator[Case]:
    plan_cmd = ("plan", "{plan}")
    run_cmd = ("run", "{plan}", "--db", "{case}/new.sqlite", "--workdir", "{case}/w")
    for name, text in _field_plans():
        yield Case(f"{name} | plan", plan_cmd, plan=text, files=FILES)
        yield Case(f"{name} | run", run_cmd, plan=text, files=FILES, not_for="cannot serve")
    for name, text, allow in _serving_plans():
        argv: tuple[str, ...] = run_cmd
        for a in allow:
            argv += ("--allow-destroy", a)
        yield Case(f"serving {name} | run", argv, plan=text, files=FILES)
    valid = table("iscsi", EXISTING["iscsi"])
    for a in ALLOW_DESTROY:
        yield Case(
            f"allow-destroy {shown(a, 60)} | run",
            (*run_cmd, "--allow-destroy", a),
            plan=valid,
            files=FILES,
        )
        yield Case(
            f"allow-destroy {shown(a, 60)} | plan",
            (*plan_cmd, "--allow-destroy", a),
            plan=valid,
            files=FILES,
        )


CASES: list[Case] = list(_cases())


def test_the_network_campaign_has_at_least_300_cases_with_unique_names() -> None:
    assert len(CASES) >= 300, len(CASES)
    assert len({c.name for c in CASES}) == len(CASES), "two cases share a name"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`check` copies a sound results database into every case; this campaign's commands read
    none."""
    root = tmp_path_factory.mktemp("netcampaign")
    s = Store(root / "sound.sqlite")
    make_sweep(s, "host-a", "quick", cells=2)
    s.close()
    return root


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_bad_network_input(
    case: Case, lab: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    problems = check(case, lab, tmp_path, monkeypatch)
    assert not problems, f"{case.name}: " + "; ".join(problems)
