"""Run by targetcli-fb's own interpreter: read targetcli command lines on stdin and bind each to the
signature of the targetcli-fb method that runs it (ui_command_create of the backstore, target or LUN
node; `set attribute` against the storage object's attributes; saveconfig), without configfs (no LIO
target here). Prints one line per command, "ok PATH COMMAND" or "bad …: why", and exits 1 where one
is bad."""

import inspect
import shlex
import sys

from targetcli import ui_backstore, ui_root, ui_target

# The node class a path names (targetcli-fb 2.1's tree): /backstores/TYPE, /backstores/TYPE/NAME,
# /iscsi, /iscsi/IQN/tpg1/luns.
BACKSTORES = {
    "fileio": ui_backstore.UIFileIOBackstore,
    "block": ui_backstore.UIBlockBackstore,
    "ramdisk": ui_backstore.UIRDMCPBackstore,
}


def node_class(path: str) -> type:
    parts = path.strip("/").split("/")
    if parts[0] == "backstores" and len(parts) == 2:
        return BACKSTORES[parts[1]]
    if parts[0] == "backstores" and len(parts) == 3:
        return ui_backstore.UIStorageObject
    if parts == ["iscsi"]:
        return ui_target.UIFabricModule
    if parts[0] == "iscsi" and parts[2:] == ["tpg1", "luns"]:
        return ui_target.UILUNs
    raise KeyError(path)


def check(words: list[str]) -> str:
    if words[1:] == ["saveconfig"]:
        inspect.signature(ui_root.UIRoot.ui_command_saveconfig).bind(None)
        return "ok saveconfig"
    path, command, *args = words[1:]
    cls = node_class(path)
    if command == "set":
        group, *pairs = args
        attributes = cls.ui_desc_attributes
        for key, value in (p.split("=", 1) for p in pairs):
            kind = attributes[key][0]  # a KeyError: not an attribute of a storage object
            if kind == "number":
                int(value)
        return f"ok {path} set {group}"
    positional = [a for a in args if "=" not in a]
    named = dict(a.split("=", 1) for a in args if "=" in a)
    inspect.signature(getattr(cls, f"ui_command_{command}")).bind(None, *positional, **named)
    return f"ok {path} {command}"


def main() -> int:
    bad = 0
    for line in sys.stdin.read().replace("\\\n", "").splitlines():
        words = shlex.split(line)
        if not words:
            continue
        try:
            print(check(words))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            print(f"bad {line}: {type(e).__name__} {e}")
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
