"""One data directory, one `messageweave run` (issue #32, finding 8).

`run` holds an exclusive `flock` on `<data-dir>/messageweave.lock` for as long as it serves (the
open file description survives the exec into the serving interpreter, which keeps the
descriptor), and writes its pid and URL into that file. The kernel drops the lock when the
process dies, however it dies, so a lock left by a killed run is simply taken by the next one:
there is no stale-lock guessing. A second start on the same directory finds the lock taken and
stops before it touches the first one's Redis, socket or key files, naming the first's URL and
pid.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

LOCK_FILE = "messageweave.lock"
# The descriptor holding the lock, for the serving interpreter `run` becomes (which keeps it).
LOCK_FD_ENV = "MESSAGEWEAVE_LOCK_FD"
_OWNER_WAIT_S = 1.0  # the owner writes its pid right after it locks: wait that long for it


@dataclass(frozen=True)
class Owner:
    """The running instance that holds a data directory's lock, as it wrote itself down."""

    pid: int | None
    url: str | None

    def message(self) -> str:
        where = f" on {self.url}" if self.url else ""
        pid = f" (pid {self.pid})" if self.pid else ""
        return f"MessageWeave is already running{where}{pid}"


class AlreadyRunning(Exception):
    def __init__(self, owner: Owner) -> None:
        super().__init__(owner.message())
        self.owner = owner


def _parse(raw: bytes) -> Owner:
    """The pid and URL a lock file holds; `ValueError` (or `AttributeError`) when it holds no
    JSON object."""
    record = json.loads(raw)
    pid, url = record.get("pid"), record.get("url")
    return Owner(pid if isinstance(pid, int) else None, url if isinstance(url, str) else None)


def _read_owner(fd: int) -> Owner:
    """What the holder of the lock on `fd`'s file wrote (it may be writing it right now)."""
    deadline = time.monotonic() + _OWNER_WAIT_S
    while True:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            return _parse(os.pread(fd, 4096, 0))
        if time.monotonic() > deadline:
            return Owner(None, None)
        time.sleep(0.02)


def _locked_by_another(fd: int, how: int) -> bool:
    try:
        fcntl.flock(fd, how | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return True
        raise
    return False


def take(directory: Path, url: str) -> int:
    """Lock `directory` for this process and write its pid and `url` into the lock file.
    Returns the descriptor that holds the lock (closing it, or exiting, releases it).
    Raises `AlreadyRunning` when another live process holds it."""
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    try:
        if _locked_by_another(fd, fcntl.LOCK_EX):
            raise AlreadyRunning(_read_owner(fd))
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps({"pid": os.getpid(), "url": url}) + "\n").encode(), 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def owner_of(directory: Path) -> Owner | None:
    """The instance running on `directory`, or None; creates nothing (`run` asks this when its
    port is taken, before it has made the data directory). A shared lock taken for an instant
    tells whether an exclusive one is held."""
    try:
        fd = os.open(directory / LOCK_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return _read_owner(fd) if _locked_by_another(fd, fcntl.LOCK_SH) else None
    finally:
        os.close(fd)


def last_recorded(directory: Path) -> Owner | None:
    """What the last instance on `directory` wrote, running or not (`diagnose` takes the port a
    stopped one was started with from its URL); None when nothing was ever written."""
    try:
        fd = os.open(directory / LOCK_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return _parse(os.pread(fd, 4096, 0))
    except (OSError, ValueError, AttributeError):
        return None
    finally:
        os.close(fd)


def hand_over(fd: int, env: dict[str, str]) -> None:
    """Keep the lock across the exec into the serving interpreter (`LOCK_FD_ENV`)."""
    os.set_inheritable(fd, True)
    env[LOCK_FD_ENV] = str(fd)


def keep_private() -> None:
    """In the serving interpreter: the inherited lock is not passed on to any child."""
    with contextlib.suppress(KeyError, ValueError, OSError):
        os.set_inheritable(int(os.environ.pop(LOCK_FD_ENV)), False)
