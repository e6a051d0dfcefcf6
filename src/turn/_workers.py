"""Worker ids in turn leases, and whether the process behind one has certainly ended."""

from __future__ import annotations

import os
import socket
import uuid


def new_worker_id() -> str:
    """This process's id in turn leases: host, pid and a random suffix (pids are reused)."""
    worker_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
    _OURS.add(worker_id)
    return worker_id


_OURS: set[str] = set()  # the worker ids this process made (several apps may run in one)


def worker_gone(worker_id: str) -> bool:
    """Whether the process behind ``worker_id`` (``new_worker_id``'s) has certainly ended:
    it ran on this host and no process has its pid any more, or this process has it (a
    restart that got the same pid, as in a container) and did not make that id. Unsure
    (another host, a pid in use, another format): ``False``."""
    parts = worker_id.rsplit(":", 2)
    if len(parts) != 3 or parts[0] != socket.gethostname() or not parts[1].isdigit():
        return False
    pid = int(parts[1])
    if pid == os.getpid():
        return worker_id not in _OURS
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return True
    except OSError:  # it exists (another user's) or cannot be asked
        return False
    return False
