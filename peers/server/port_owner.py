"""Which process answers on a port of this machine, and whether it is the server the run started: the listening
socket's inode from /proc/net/tcp and /proc/net/tcp6, the processes holding that inode among their open files
(/proc/PID/fd), and each holder's ancestry and session. The server the run started runs in a session of its own
(`process`), so whatever it starts to listen for it (a worker, a wrapper's child) is its descendant or in its
session.

Linux only, and only what this user may read: elsewhere, for a host that is not this machine, or for a socket
held by another user's process (a container's port forwarder), the owner cannot be named, and `check_owner` says so
instead of guessing."""

from __future__ import annotations

import ipaddress
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

PROC = Path("/proc")
LISTEN = "0A"  # the TCP state column of a listening socket in /proc/net/tcp
LOCAL_NAMES = frozenset({"localhost", "0.0.0.0", "::", ""})


@dataclass(frozen=True)
class Owner:
    """What was found: `ours` True (the started process or one it started), False (another process: `pids`), None
    (not known: `why`)."""

    ours: bool | None
    why: str
    pids: tuple[int, ...] = ()


def check_owner(url: str, child_pid: int, proc: Path = PROC) -> Owner:
    """Whether the process that listens on `url`'s port is `child_pid` or one of the processes it started."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    if not _is_this_machine(parts.hostname or ""):
        return Owner(None, f"not checked: {parts.hostname} is not this machine")
    inodes = listening_inodes(port, proc)
    if inodes is None:
        return Owner(None, "not checked: this system has no /proc/net/tcp to read")
    if not inodes:
        return Owner(None, f"not checked: no process of this machine's network namespace listens on port {port}")
    holders = socket_holders(inodes, proc)
    if not holders:
        return Owner(None, f"not checked: the process listening on port {port} belongs to another user")
    ours = [pid for pid in holders if _started_by(pid, child_pid, proc)]
    if ours:
        return Owner(True, f"port {port} is held by pid {ours[0]}, which the server command started (pid {child_pid})")
    shown = ", ".join(f"pid {pid} ({describe(pid, proc)})" for pid in sorted(holders)[:3])
    why = f"port {port} is held by {shown}, not by the server the command started (pid {child_pid})"
    return Owner(False, why, tuple(sorted(holders)))


def listening_inodes(port: int, proc: Path = PROC) -> set[int] | None:
    """The inodes of the sockets listening on `port` (any local address); None where /proc/net/tcp is missing."""
    found: set[int] = set()
    read_any = False
    for name in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / name).read_text().splitlines()[1:]
        except OSError:
            continue
        read_any = True
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != LISTEN:
                continue
            try:
                if int(fields[1].rsplit(":", 1)[1], 16) == port:
                    found.add(int(fields[9]))
            except (IndexError, ValueError):
                continue
    return found if read_any else None


def socket_holders(inodes: set[int], proc: Path = PROC) -> set[int]:
    """The pids holding one of `inodes` among their open files (of those this user may read)."""
    wanted = {f"socket:[{inode}]" for inode in inodes}
    holders = set()
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:
            continue  # another user's process, or one that has just exited
        for fd in fds:
            try:
                if os.readlink(fd) in wanted:
                    holders.add(int(entry.name))
                    break
            except OSError:
                continue
    return holders


def describe(pid: int, proc: Path = PROC) -> str:
    """A process's command line, shortened (what a person needs to find and stop it)."""
    try:
        words = (proc / str(pid) / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return "command unknown"
    text = " ".join(w.decode("utf-8", "replace") for w in words if w)
    return text[:120] + ("..." if len(text) > 120 else "") if text else "command unknown"


def _started_by(pid: int, child_pid: int, proc: Path) -> bool:
    """`pid` is `child_pid`, a descendant of it, or in the session it leads (a descendant whose parent has exited)."""
    seen = set()
    current = pid
    while current > 1 and current not in seen:
        if current == child_pid:
            return True
        seen.add(current)
        stat = _stat(current, proc)
        if stat is None:
            return False
        if stat[1] == child_pid:  # its session: the started server leads one of its own
            return True
        current = stat[0]
    return False


def _stat(pid: int, proc: Path) -> tuple[int, int] | None:
    """(parent pid, session id) from /proc/PID/stat; None when it cannot be read."""
    try:
        text = (proc / str(pid) / "stat").read_text()
        fields = text[text.rindex(")") + 2 :].split()  # after the command name, which may hold spaces
        return int(fields[1]), int(fields[3])
    except (OSError, ValueError, IndexError):
        return None


def _is_this_machine(host: str) -> bool:
    if host.lower() in LOCAL_NAMES or host.lower() == socket.gethostname().lower():
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        try:
            address = ipaddress.ip_address(socket.gethostbyname(host))
        except (OSError, ValueError):
            return False
    return address.is_loopback or address.is_unspecified
