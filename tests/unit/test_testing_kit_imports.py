"""The merchant developer's kit is a client of Bankrail: importing it loads no other module
of the package (it talks to the service over HTTP only) and starts nothing."""

from __future__ import annotations

import json
import subprocess
import sys


def test_bankrail_testing_imports_nothing_else_of_bankrail() -> None:
    probe = (
        "import json, sys, threading, bankrail.testing; "
        "print(json.dumps([sorted(m for m in sys.modules if m.startswith('bankrail')),"
        " threading.active_count()]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    modules, threads = json.loads(done.stdout)
    assert {m for m in modules if not m.startswith("bankrail.testing")} == {"bankrail"}
    assert threads == 1
