"""Generate the fuzz corpus: hostile and careless plans, argument vectors and database files.

Deterministic (no randomness): re-running it rewrites the same files. Run from the repository root:

    python tests/data/fuzz/generate.py

tests/test_fuzz.py runs every case and checks: no traceback, exit status 0 or 2 (never 1, an
internal error), and no file written outside the case's temporary directory."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

HERE = Path(__file__).parent

BAD_VALUES: dict[str, object] = {
    "string": '"5"',
    "bool-as-string": "'no'",
    "true": "true",
    "zero": "0",
    "negative": "-1",
    "float": "0.5",
    "tiny": "1e-9",
    "inf": "inf",
    "nan": "nan",
    "neg-inf": "-inf",
    "huge-int": "9" * 400,
    "huge-float": "1e308",
    "empty-string": '""',
    "empty-list": "[]",
    "list-of-int": "[1, 2]",
    "nested-list": '[["a"]]',
    "table": "{ a = 1 }",
    "long-string": '"' + "x" * 5000 + '"',
    "unicode": '"ünïcødé ☃"',
    "date": "1979-05-27",
    "dup-list": '["none", "none"]',
}
FIELDS = [
    "name",
    "description",
    "tier",
    "format",
    "preallocation",
    "cache",
    "aio",
    "bus",
    "modifier",
    "workloads",
    "size",
    "image_size",
    "runtime",
    "ramp",
    "ci_target",
    "time_budget",
    "null_ceiling",
    "guest_fs",
    "guest_memory_mb",
    "keep_caches_warm",
    "run_timeout",
]
# Values some fields take as text: each gets a few careless spellings.
TEXT_CASES = {
    "size": ['"999T"', '"-5M"', '"5 potatoes"', '"0"', '"1.5.6G"', f'"{"9" * 400}M"', '"1e400M"'],
    "time_budget": ['"-1m"', '"10 years"', '"0s"', f'"{"9" * 300}h"', '"inf"'],
    "name": ['"../../etc/passwd"', '"a/b"', '"with space"', '"-dash"', '"null\\u0000byte"'],
    "workloads": [
        '["no-such-workload"]',
        '["file:/bin/ls"]',
        '["file:/proc/self/mem"]',
        '["file:missing.fio"]',
        '["file:job.fio"]',
    ],
}
STRUCTURE = {
    "empty": b"",
    "only-comment": b"# nothing\n",
    "bom": b'\xef\xbb\xbfcache = ["none"]\n',
    "crlf": b'cache = ["none"]\r\nruntime = 1\r\n',
    "non-utf8": b'name = "x"\ncache = ["none\xff"]\n',
    "latin1": 'description = "caf\xe9"\n'.encode("latin-1"),
    "nul": b'cache = ["none"]\x00\n',
    "binary": bytes(range(256)) * 4,
    "deep-array": b"a = " + b"[" * 5000 + b"]" * 5000 + b"\n",
    "deep-table": b"a = " + b"{ b = " * 3000 + b"1" + b" }" * 3000 + b"\n",
    "unterminated-string": b'name = "x\n',
    "unterminated-list": b'cache = ["none"\n',
    "duplicate-key": b"runtime = 1\nruntime = 2\n",
    "duplicate-table": b"[repetitions]\nmin = 1\n[repetitions]\nmax = 2\n",
    "huge-digits": b"runtime = " + b"9" * 5000 + b"\n",
    "schema-version": b"schema_version = 'abc'\n",
    "typo-cache": b'cach = ["none"]\n',
    "typo-repetitions": b"[repetitions]\nmni = 3\n",
    "typo-backing": b'[[backing]]\ntype = "loopfs"\nsise = "1G"\n',
    "repetitions-inverted": b"[repetitions]\nmin = 5\nmax = 2\n",
    "repetitions-string": b'[repetitions]\nmin = "3"\n',
    "repetitions-list": b"repetitions = [1, 2]\n",
    "backing-table-not-array": b'[backing]\ntype = "dir"\n',
    "backing-no-type": b'[[backing]]\npath = "/tmp"\n',
    "backing-bad-type": b'[[backing]]\ntype = "ramdisk"\n',
    "backing-proc": b'[[backing]]\ntype = "dir"\npath = "/proc"\n',
    "backing-sys": b'[[backing]]\ntype = "dir"\npath = "/sys/kernel"\n',
    "backing-name-null": b'[[backing]]\ntype = "dir"\nname = "null"\n',
    "backing-loopfs-999T": b'[[backing]]\ntype = "loopfs"\nfs = "ext4"\nsize = "999T"\n',
    "backing-blockdev-unallowed": b'[[backing]]\ntype = "blockdev"\ndevice = "/dev/sda"\n',
    "backing-dup-labels": b'[[backing]]\ntype = "dir"\n[[backing]]\ntype = "dir"\n',
    "image-smaller-than-size": b'tier = ["guest"]\nsize = "1G"\nimage_size = "512M"\n',
    "all-pruned": b'tier = ["baremetal"]\ncache = ["none"]\naio = '
    b'["native"]\n[[backing]]\ntype="tmpfs"\n',
    "many-values": b"cache = [" + b", ".join(b'"none"' for _ in range(1000)) + b"]\n",
}
JOB_FILE = "[job]\nrw=randread\nbs=4k\n"

ARGV: list[list[str]] = [
    ["--help"],
    ["--version"],
    ["plans"],
    ["plan"],
    ["plan", "quick"],
    ["plan", "quick", "--explain"],
    ["plan", "hallyn"],
    ["plan", "salter", "--explain"],
    ["plan", "nosuch"],
    ["plan", "x" * 5000],
    ["plan", "/proc/self/mem"],
    ["plan", "file:/proc/self/mem"],
    ["plan", "/dev/null"],
    ["plan", "/"],
    ["plan", "/etc"],
    ["plan", "{tmp}"],
    ["plan", ""],
    ["plan", "-"],
    ["plan", "quick", "--allow-destroy", "/"],
    ["plan", "quick", "--allow-destroy", "/dev/null"],
    ["plan", "\x7f\x01"],
    ["plan", "a\u202eb.toml"],
    ["results"],
    ["results", "--db", "{tmp}"],
    ["results", "--db", "/dev/null"],
    ["results", "--db", "/proc/self/mem"],
    ["results", "--db", "{tmp}/none.sqlite"],
    ["results", "--db", "{db}", "--metric", "bogus"],
    ["results", "--db", "{db}", "--metric", "all"],
    ["results", "--db", "{db}", "--metric", ""],
    ["results", "--db", "{db}", "--format", "xml"],
    ["results", "--db", "{db}", "--format", "json"],
    ["results", "--db", "{db}", "--format", "csv"],
    ["results", "--db", "{db}", "--sweep", "0"],
    ["results", "--db", "{db}", "--sweep", "-1"],
    ["results", "--db", "{db}", "--sweep", "99999999999999999999"],
    ["results", "--db", "{db}", "--sweep", "abc"],
    ["results", "--db", "{db}", "--monitor"],
    ["rank", "--db", "{db}"],
    ["rank", "--db", "{db}", "--top", "0"],
    ["rank", "--db", "{db}", "--top", "-5"],
    ["rank", "--db", "{db}", "--min-runs", "1"],
    ["rank", "--db", "{db}", "--min-runs", "0"],
    ["rank", "--db", "{db}", "--min-runs", "2"],
    ["rank", "--db", "{db}", "--max-noise", "-1"],
    ["rank", "--db", "{db}", "--max-noise", "nan"],
    ["rank", "--db", "{db}", "--max-noise", "inf"],
    ["rank", "--db", "{db}", "--max-noise", "0"],
    ["rank", "--db", "{db}", "--workload", "nosuch"],
    ["rank", "--db", "{db}", "--metric", "nosuch"],
    ["rank", "--db", "{db}", "--score", "bogus"],
    ["rank", "--db", "{db}", "--score", "weighted-read"],
    ["rank", "--db", "{db}", "--score", "weighted-mixed"],
    ["rank", "--db", "{db}", "--sweep", "2"],
    ["compare", "{db}"],
    ["compare", "{db}", "{db}"],
    ["compare", "{db}", "{db}", "--all"],
    ["compare", "{db}", "{tmp}/none.sqlite"],
    ["compare", "{db}", "/dev/zero"],
    ["compare", "{db}", "{db}", "--metric", "bogus"],
    ["compare", "{db}", "{db}", "--sweep-a", "5"],
    ["monitor"],
    ["monitor", "--run", "1", "--db", "{db}"],
    ["monitor", "--run", "0", "--db", "{db}"],
    ["monitor", "--run", "-1", "--db", "{db}"],
    ["monitor", "--run", "1", "--db", "{db}", "--fields", "bogus"],
    ["monitor", "--run", "1", "--db", "{db}", "--fields", ""],
    ["monitor", "--run", "1", "--db", "{db}", "--fields", ",,,"],
    ["monitor", "--run", "1", "--db", "{db}", "--fields", "cpu."],
    ["monitor", "--run", "x", "--db", "{db}"],
    ["run"],
    ["run", "--no-such-option"],
    ["run", "nosuch"],
    ["run", "quick", "--db", "{tmp}"],
    ["run", "quick", "--db", "/dev/null"],
    ["run", "quick", "--db", "{tmp}/r.sqlite", "--workdir", "/dev/null"],
    ["run", "quick", "--db", "{tmp}/r.sqlite", "--workdir", "/proc"],
    ["run", "quick", "--db", "{tmp}/r.sqlite", "--workdir", "/proc/self"],
    ["run", "quick", "--db", "{tmp}/r.sqlite", "--workdir", "/sys/kernel/x"],
    ["run", "quick", "--db", "{tmp}/r.sqlite", "--workdir", "{tmp}/file"],
    ["run", "quick", "--db", "{tmp}/r.sqlite", "--workdir", "{tmp}/file/sub"],
    ["run", "quick", "--db", "{tmp}/r.sqlite", "--monitor-interval", "0"],
    ["run", "quick", "--db", "{tmp}/r.sqlite", "--monitor-interval", "nan"],
    ["run", "quick", "--db", "{tmp}/r.sqlite", "--monitor-interval", "1e999"],
    ["run", "quick", "--db", "{tmp}/r.sqlite", "--accel", "xen"],
    ["run", "quick", "--db", "{tmp}/nodir/r.sqlite", "--workdir", "{tmp}/w"],
    ["run", "quick", "--db", "{tmp}/file", "--workdir", "{tmp}/w"],
    ["run", "{plan}/structure--deep-array.toml", "--db", "{tmp}/r.sqlite", "--workdir", "{tmp}/w"],
    ["guest"],
    ["guest", "nosuch"],
    ["nosuch"],
    ["results", "--db"],
    ["--db", "x"],
]
DB_CASES = [
    "empty",
    "text",
    "foreign",
    "sweeps-other-columns",
    "no-tables",
    "newer-schema",
    "bad-version",
    "meta-only",
    "truncated",
    "missing-table",
    "no-sweeps",
]


def make_db(kind: str, path: Path, schema1: Path) -> None:
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "text":
        path.write_text("id,name\n1,a\n")
    elif kind == "truncated":
        path.write_bytes(schema1.read_bytes()[:5000])
    else:
        if kind in ("newer-schema", "bad-version", "missing-table", "no-sweeps"):
            shutil.copyfile(schema1, path)
        con = sqlite3.connect(path)
        con.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
        if kind in ("newer-schema", "bad-version", "missing-table"):  # keep the corpus small
            con.execute("UPDATE runs SET raw_output='', job_text=''")
            con.execute("DELETE FROM monitor WHERE t > 1.5")
        if kind == "foreign":
            con.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
        elif kind == "sweeps-other-columns":
            con.execute("CREATE TABLE sweeps (id INTEGER PRIMARY KEY, broom TEXT)")
        elif kind == "no-tables":
            con.execute("PRAGMA user_version = 3")
        elif kind == "newer-schema":
            con.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
        elif kind == "bad-version":
            con.execute("UPDATE meta SET value='abc' WHERE key='schema_version'")
        elif kind == "meta-only":
            con.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            con.execute("INSERT INTO meta VALUES ('schema_version', '1')")
        elif kind == "missing-table":
            con.execute("DROP TABLE monitor")
        elif kind == "no-sweeps":
            for t in ("monitor", "samples", "runs", "cells", "sweeps"):
                con.execute(f"DELETE FROM {t}")
        con.commit()
        con.execute("VACUUM")
        con.close()


def main() -> None:
    plans = HERE / "plans"
    shutil.rmtree(plans, ignore_errors=True)
    plans.mkdir()
    (plans / "job.fio").write_text(JOB_FILE)
    n = 0
    for field in FIELDS:
        for label, value in BAD_VALUES.items():
            (plans / f"{field}--{label}.toml").write_text(f"{field} = {value}\n")
            n += 1
        for i, value in enumerate(TEXT_CASES.get(field, [])):
            (plans / f"{field}--text{i}.toml").write_text(f"{field} = {value}\n")
            n += 1
    for label, raw in STRUCTURE.items():
        (plans / f"structure--{label}.toml").write_bytes(raw)
        n += 1
    dbs = HERE / "db"
    shutil.rmtree(dbs, ignore_errors=True)
    dbs.mkdir()
    schema1 = HERE.parent / "schema1" / "iomatrix-schema1.sqlite"
    for kind in DB_CASES:
        make_db(kind, dbs / f"{kind}.sqlite", schema1)
    (HERE / "argv.json").write_text(json.dumps(ARGV, indent=0, ensure_ascii=False) + "\n")
    print(f"{n} plans, {len(ARGV)} argument vectors, {len(DB_CASES)} databases")


if __name__ == "__main__":
    main()
