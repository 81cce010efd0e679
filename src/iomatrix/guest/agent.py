"""A client of the QEMU guest agent (qemu-ga) over the unix socket of QEMU's virtio-serial chardev.

The protocol is QMP-like JSON, one object per request and per reply, with two quirks this client
handles:

- **Stale replies.** Bytes the host writes before the agent runs wait in the channel, and the agent
  answers all of them once it starts; a reply may also outlive a request that timed out. So every
  request is preceded by `guest-sync-delimited` with a fresh id: the agent sends 0xFF then
  `{"return": id}`, and everything before the reply carrying that id is stale and dropped
  (`split_replies` skips the 0xFF delimiters).
- **Commands that run.** `guest-exec` returns a pid at once; `guest-exec-status` is polled until
  `exited`, its output base64 (`out-data`, `err-data`, capped by the agent at 16 MB).

Every wait is bounded: a request has a timeout, and `wait_for_agent` gives up after its time limit
with the caller's `why_not()` (e.g. the last console lines) in the one-line error."""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iomatrix.errors import UserError

DELIMITER = b"\xff"
_ids = itertools.count(int(time.time()) % 100000 * 1000)


class AgentTimeout(UserError):
    """The agent did not answer in time."""


class AgentCommandError(UserError):
    """The agent answered a request with an error."""


def split_replies(buf: bytes) -> tuple[list[dict], bytes]:
    """The complete JSON objects at the start of `buf` and the incomplete rest.

    >>> split_replies(b'\\xff{"return": 7}\\n{"return": {}}\\n{"ret')
    ([{'return': 7}, {'return': {}}], b'{"ret')
    """
    decoder = json.JSONDecoder()
    text = buf.decode("utf-8", "surrogateescape")  # lossless: the rest is encoded back unchanged
    replies: list[dict] = []
    pos = 0
    while True:
        while pos < len(text) and (text[pos].isspace() or text[pos] == "\udcff"):
            pos += 1
        if pos >= len(text):
            return replies, b""
        try:
            obj, end = decoder.raw_decode(text, pos)
        except ValueError:
            return replies, text[pos:].encode("utf-8", "surrogateescape")
        if isinstance(obj, dict):
            replies.append(obj)
        pos = end


@dataclass(frozen=True)
class ExecResult:
    """What `guest-exec` ran: exit status (None when killed by a signal), the signal, stdout and
    stderr."""

    exitcode: int | None
    signal: int | None
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exitcode == 0


def exec_result(status: dict) -> ExecResult:
    """An ExecResult from an exited `guest-exec-status` reply."""

    def text(key: str) -> str:
        data = status.get(key)
        return base64.b64decode(data).decode("utf-8", "replace") if data else ""

    return ExecResult(
        exitcode=status.get("exitcode"),
        signal=status.get("signal"),
        stdout=text("out-data"),
        stderr=text("err-data"),
    )


class GuestAgent:
    """One connection to the agent's socket (QEMU is the server: `-chardev
    socket,server=on,wait=off`)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._sock: socket.socket | None = None
        self._buf = b""

    def close(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None

    def _connect(self) -> socket.socket:
        if self._sock is None:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(str(self.path))
            except OSError:
                s.close()
                raise
            self._sock = s
            self._buf = b""
        return self._sock

    def _send(self, obj: dict, delimit: bool = False) -> None:
        data = (DELIMITER if delimit else b"") + json.dumps(obj).encode() + b"\n"
        sock = self._connect()
        sock.settimeout(30.0)  # the agent reads what it is sent; a full channel is a dead agent
        try:
            sock.sendall(data)
        except TimeoutError:
            raise AgentTimeout(
                "the guest agent's channel is full (it reads nothing)",
                hint="is qemu-guest-agent running in the guest?",
            ) from None

    def try_send(self, obj: dict, timeout: float = 2.0) -> bool:
        """Send a delimited request unless the channel is full (False): a half-sent request is
        harmless, the next request's 0xFF delimiter resets the agent's parser."""
        sock = self._connect()
        sock.settimeout(timeout)
        try:
            sock.sendall(DELIMITER + json.dumps(obj).encode() + b"\n")
        except TimeoutError:
            return False
        return True

    def next_reply(self, deadline: float) -> dict | None:
        """The next reply, or None at `deadline`."""
        sock = self._connect()
        while True:
            replies, rest = split_replies(self._buf)
            if replies:
                first = replies[0]
                # Keep what follows the first object for the next call (re-encode it: rare, small).
                self._buf = b"".join(json.dumps(r).encode() + b"\n" for r in replies[1:]) + rest
                return first
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            sock.settimeout(left)
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                return None
            if not chunk:
                self.close()
                raise ConnectionError("the guest agent's socket was closed (QEMU exited?)")
            self._buf += chunk

    def sync(self, timeout: float) -> bool:
        """Resynchronise: True once the agent answered a fresh `guest-sync-delimited` (older replies
        dropped)."""
        sync_id = next(_ids)
        deadline = time.monotonic() + timeout
        self._send({"execute": "guest-sync-delimited", "arguments": {"id": sync_id}}, delimit=True)
        while (reply := self.next_reply(deadline)) is not None:
            if reply.get("return") == sync_id:
                return True
        return False

    def call(self, command: str, arguments: dict | None = None, timeout: float = 30.0) -> Any:
        """Run one agent command and return its "return" value."""
        if not self.sync(timeout):
            raise AgentTimeout(
                f"the guest agent did not answer within {timeout:g} s",
                hint="is qemu-guest-agent running in the guest?",
            )
        request: dict[str, Any] = {"execute": command}
        if arguments:
            request["arguments"] = arguments
        self._send(request)
        reply = self.next_reply(time.monotonic() + timeout)
        if reply is None:
            raise AgentTimeout(
                f"the guest agent did not answer {command} within {timeout:g} s",
                hint="is qemu-guest-agent running in the guest?",
            )
        if "error" in reply:
            err = reply["error"]
            raise AgentCommandError(
                f"guest agent: {command} failed: {err.get('desc', err)}",
                hint="see the guest's journal",
            )
        return reply.get("return")

    def write_file(self, path: str, data: bytes, timeout: float = 30.0) -> None:
        """Write `data` to `path` in the guest (guest-file-open/write/close)."""
        handle = self.call("guest-file-open", {"path": path, "mode": "w"}, timeout)
        try:
            self.call(
                "guest-file-write",
                {"handle": handle, "buf-b64": base64.b64encode(data).decode()},
                timeout,
            )
        finally:
            self.call("guest-file-close", {"handle": handle}, timeout)

    def exec(self, argv: list[str], timeout: float = 60.0, poll_s: float = 0.2) -> ExecResult:
        """Run `argv` in the guest with its output captured, and wait (at most `timeout` s) for it
        to exit."""
        pid = self.call("guest-exec", {"path": argv[0], "arg": argv[1:], "capture-output": True})[
            "pid"
        ]
        deadline = time.monotonic() + timeout
        while True:
            status = self.call(
                "guest-exec-status", {"pid": pid}, timeout=max(1.0, deadline - time.monotonic())
            )
            if status.get("exited"):
                return exec_result(status)
            if time.monotonic() >= deadline:
                raise AgentTimeout(
                    f"{' '.join(argv)} did not finish in the guest within {timeout:g} s",
                    hint="give it a longer time limit",
                )
            time.sleep(poll_s)


def wait_for_agent(
    agent: GuestAgent,
    limit_s: float,
    alive: Callable[[], str | None],
    why_not: Callable[[], str],
    attempt_s: float = 3.0,
    resend_s: float = 30.0,
    progress: Callable[[float], None] | None = None,
    progress_s: float = 30.0,
) -> float:
    """Wait until the agent answers `guest-ping`; return the seconds waited.

    One `guest-sync-delimited` waits in the channel until the agent starts (QEMU reads nothing from
    the socket while the guest's port is closed, so requests sent every few seconds would fill it);
    it is sent again only every `resend_s` (an agent that restarted may have dropped it), and any of
    them answered means the agent is up. `alive()` returns None while the guest runs, else why it
    stopped (QEMU exited): that ends the wait at once. On the time limit or a stop, one line: what
    happened and `why_not()` (the last console lines). `progress(seconds waited)` is called every
    `progress_s` while it waits."""
    t0 = time.monotonic()
    deadline = t0 + limit_s
    sent: set[int] = set()
    next_send = t0
    next_progress = t0 + progress_s
    while True:
        if progress is not None and time.monotonic() >= next_progress:
            progress(time.monotonic() - t0)
            next_progress += progress_s
        stopped = alive()
        if stopped is not None:
            raise UserError(
                f"the guest stopped before its agent answered: {stopped}; {why_not()}",
                hint="read the run's console.log",
            )
        now = time.monotonic()
        if now >= deadline:
            raise AgentTimeout(
                f"the guest agent did not answer guest-ping within {limit_s:g} s; {why_not()}",
                hint="read the run's console.log (an image without qemu-guest-agent never answers)",
            )
        try:
            if now >= next_send:
                sync_id = next(_ids)
                if agent.try_send(
                    {"execute": "guest-sync-delimited", "arguments": {"id": sync_id}}
                ):
                    sent.add(sync_id)
                next_send = now + resend_s
            reply = agent.next_reply(min(now + attempt_s, deadline))
            if reply is not None and reply.get("return") in sent:
                agent.call(
                    "guest-ping", timeout=max(1.0, min(attempt_s * 10, deadline - time.monotonic()))
                )
                return time.monotonic() - t0
        except AgentTimeout:
            continue  # the sync answered but the ping did not in time: try again while time is left
        except (ConnectionError, FileNotFoundError):
            agent.close()
            sent.clear()
            next_send = 0.0
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
