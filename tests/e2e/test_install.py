"""Bankrail installed as the docs say: the wheel `./dev build` makes, installed into a fresh
virtual environment, serves its API, pages and static files from there; and `./dev serve`
starts again with no package index once its `.venv` is installed."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from e2e_helpers import private_data_dir, processes_mentioning, wait_for

from support.server import free_port

pytestmark = pytest.mark.slow  # builds, installs into new virtual environments, serves

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
# The embedded PostgreSQL and a generated operator token are wanted here, whatever the
# suite runs with.
_UNSET = (
    "DATABASE_URL",
    "BANKRAIL_ADMIN_TOKEN",
    "BANKRAIL_DATA_DIR",
    "BANKRAIL_PORT",
    "BANKRAIL_HOST",
    "BANKRAIL_PUBLIC_URL",
    "BANKRAIL_MODE",
    "BANKRAIL_VENV",
    "VIRTUAL_ENV",
)
# pip with no package index at all: none configured, none reachable, no local wheels.
_OFFLINE = {
    "PIP_CONFIG_FILE": os.devnull,
    "PIP_NO_INDEX": "1",
    "PIP_INDEX_URL": "http://127.0.0.1:9/",
    "PIP_EXTRA_INDEX_URL": "",
    "PIP_FIND_LINKS": "",
}


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _UNSET}
    return {**env, **extra}


@pytest.fixture
def place() -> Iterator[Path]:
    """A directory of the test's own, holding `data` (the data directory) and whatever
    else the test makes; every process of the data directory ended afterwards."""
    with private_data_dir("bankrail-e2e-install-") as data_dir:
        yield data_dir.parent


def _serve_until_ready(command: list[str], env: dict[str, str], log: Path, timeout: float) -> str:
    """Run a `serve` command until it prints its ready line, then stop it with SIGTERM;
    returns everything it printed. Fails if it exits first or is not ready in `timeout`."""
    with log.open("wb") as output:
        process = subprocess.Popen(
            command, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:

        def ready() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"it exited with {process.returncode}:\n{log.read_text()}")
            return "Bankrail is ready on " in log.read_text()

        wait_for(ready, timeout=timeout, what=f"the ready line of {command}", interval=0.2)
        return log.read_text()
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            code = process.wait()
        assert code == 0, log.read_text()


def test_dev_serve_starts_with_no_package_index_once_installed(place: Path) -> None:
    venv, data_dir, port = place / "venv", place / "data", free_port()
    command = ["sh", str(ROOT / "dev"), "serve", "--data-dir", str(data_dir), "--port", str(port)]
    # The first start installs (from the package index this machine has)...
    _serve_until_ready(command, _env(BANKRAIL_VENV=str(venv)), place / "first.log", timeout=900)
    # ...the second has none, and needs none: nothing it installed changed.
    second = _serve_until_ready(
        command, _env(BANKRAIL_VENV=str(venv), **_OFFLINE), place / "second.log", timeout=120
    )
    assert f"Bankrail is ready on http://127.0.0.1:{port} " in second
    assert "client_secret" in second, "the demo merchant is printed as before"


def test_the_wheel_of_dev_build_serves_from_a_fresh_virtual_environment(place: Path) -> None:
    built = subprocess.run(
        ["sh", str(ROOT / "dev"), "build"],
        env=_env(BANKRAIL_VENV=sys.prefix),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    wheel = ROOT / "dist" / f"bankrail-{VERSION}-py3-none-any.whl"
    assert built.stdout.strip().endswith(str(wheel.relative_to(ROOT))), built.stdout
    venv = place / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run(
        [venv / "bin" / "python", "-m", "pip", "install", "--quiet", str(wheel)],
        check=True,
        timeout=900,
    )
    located = subprocess.run(
        [venv / "bin" / "python", "-c", "import bankrail; print(bankrail.__file__)"],
        cwd=place,
        capture_output=True,
        text=True,
        check=True,
    )
    assert located.stdout.startswith(str(venv)), "bankrail comes from the wheel, not the checkout"

    data_dir, port = place / "data", free_port()
    base = f"http://127.0.0.1:{port}"
    command = [str(venv / "bin" / "bankrail"), "serve", "--data-dir", str(data_dir)]
    log = place / "serve.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [*command, "--port", str(port)],
            cwd=place,
            env=_env(),
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for(lambda: "Bankrail is ready on" in log.read_text(), timeout=120, what="ready")
        assert httpx.get(f"{base}/healthz").json() == {"status": "ok"}
        assert httpx.get(f"{base}/readyz").status_code == 200  # the SQL it ships is applied
        # Pages rendered from the wheel's templates, with its static files.
        assert httpx.get(f"{base}/errors").status_code == 200
        page = httpx.get(f"{base}/console", follow_redirects=True)
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        stylesheet = re.search(r'href="(/static/[\w.-]+\.css)"', page.text)
        assert stylesheet is not None, page.text[:500]
        assert httpx.get(f"{base}{stylesheet.group(1)}").status_code == 200
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=90)
    assert code == 0, log.read_text()
    wait_for(lambda: not processes_mentioning(data_dir), what="the embedded PostgreSQL to stop")
