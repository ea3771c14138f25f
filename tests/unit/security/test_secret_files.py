"""Secret files (operator token, private keys, demo credentials) are 0600 from the moment they
exist, whatever the umask, and a write that fails leaves nothing behind."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from bankrail.security.secret_files import write_secret_file


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o277], ids=["open", "usual", "owner-read-only"])
def test_a_secret_file_is_0600_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    path = tmp_path / "admin-token"
    before = os.umask(umask)
    try:
        write_secret_file(path, "admin-secret\n")
    finally:
        os.umask(before)
    assert _mode(path) == 0o600
    assert path.read_text() == "admin-secret\n"


def test_an_older_file_is_replaced_whole_and_does_not_keep_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "demo-credentials.json"
    path.write_text('{"client_secret": "old, and much longer than the new one"}\n')
    path.chmod(0o644)
    write_secret_file(path, '{"client_secret": "new"}\n')
    assert path.read_text() == '{"client_secret": "new"}\n'
    assert _mode(path) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["demo-credentials.json"]


def test_the_parent_directory_is_created(tmp_path: Path) -> None:
    path = tmp_path / "data" / "demo-signing-key.pem"
    write_secret_file(path, "-----BEGIN PRIVATE KEY-----\n")
    assert _mode(path) == 0o600


# Run in a process of its own: the file size limit (RLIMIT_FSIZE) makes the write fail after
# the file was created, which shows the mode it was created with. Written then restricted,
# the file would be left there with the umask's 0644 and the first bytes of the secret.
_FAILING_WRITE = """
import os, resource, signal, sys
from pathlib import Path
from bankrail.security.secret_files import write_secret_file
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
os.umask(0o022)
resource.setrlimit(resource.RLIMIT_FSIZE, (8, 8))
try:
    write_secret_file(Path(sys.argv[1]), "admin-" + "s" * 64 + "\\n")
except OSError as exc:
    print("failed:", exc.strerror)
else:
    print("written")
"""


def test_a_write_that_fails_leaves_nothing_others_can_read(tmp_path: Path) -> None:
    path = tmp_path / "admin-token"
    done = subprocess.run(
        [sys.executable, "-c", _FAILING_WRITE, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("failed:"), done.stdout
    left = {p.name: oct(_mode(p)) for p in tmp_path.iterdir()}
    assert left == {}, left
