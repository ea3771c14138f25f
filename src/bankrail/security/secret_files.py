"""Files that hold secrets: the operator token, private keys, demo credentials."""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

SECRET_FILE_MODE = 0o600


def write_secret_file(path: Path, text: str) -> None:
    """Write `text` to `path`, readable and writable by this user only from the moment the
    file exists, whatever the umask.

    The text goes to a new file in the same directory, created exclusively with mode 0600
    (never written first and restricted afterwards), flushed to disk, then renamed over
    `path`: a reader sees the old file or the new one whole, an older file's wider mode is
    not kept, and a write that fails (a full disk) leaves nothing behind.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temporary, flags, SECRET_FILE_MODE)
    try:
        os.fchmod(fd, SECRET_FILE_MODE)  # the umask may have taken away the owner's bits
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            fd = -1  # closed with `file` from here on
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        raise
    directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(directory)  # the rename survives a crash too
    finally:
        os.close(directory)
