"""Backups (docs/operations.md, "Backup and restore"): `pg_dump -Fc` taken while payouts are
being made, restored with `pg_restore` into a new database, and Bankrail started on it: the
ledger check is clean, and every request acknowledged before the dump started is there, its
key replaying the same answer."""

from __future__ import annotations

import glob
import shutil
import subprocess
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
from e2e_helpers import wait_for
from payout_helpers import SORT_CODE, external_beneficiary, funded_merchant, payout_body

from support.api import Operator
from support.databases import drop_database, fresh_database, run
from support.fleet import PayoutLoad, hosts, local_database

pytestmark = pytest.mark.slow


def _client_tool(name: str) -> str:
    """The newest `pg_dump` / `pg_restore` installed (it must be as new as the server)."""
    found = sorted(
        glob.glob(f"/usr/lib/postgresql/*/bin/{name}"),
        key=lambda path: int(Path(path).parts[-3]),
    )
    tool = found[-1] if found else shutil.which(name)
    if tool is None:
        pytest.skip(f"{name} is not installed (Debian package postgresql-client)")
    return tool


def test_a_dump_taken_under_load_restores_to_a_working_service() -> None:
    pg_dump, pg_restore = _client_tool("pg_dump"), _client_tool("pg_restore")
    dump = Path(tempfile.mkdtemp(prefix="bankrail-backup-")) / "bankrail.dump"
    with local_database() as (server, dsn):
        with hosts(dsn, 1, {}, "--workers", "1") as (host,):
            operator = Operator(host.base_url, host.admin_token)
            try:
                merchant = funded_merchant(operator, gbp=100_000_000)
                body = payout_body(merchant, "GBP", 5, external_beneficiary(SORT_CODE))
                load = PayoutLoad(merchant, [host.base_url], body)
                load.start()
                try:
                    wait_for(lambda: load.count() >= 100, timeout=60)
                    acknowledged = dict(load.accepted)  # before the dump starts
                    subprocess.run(
                        [pg_dump, "--format=custom", f"--file={dump}", dsn],
                        check=True,
                        capture_output=True,
                        timeout=300,
                    )
                    during = load.count()
                    wait_for(lambda: load.count() >= during + 20, timeout=60)
                finally:
                    load.stop()
                assert (load.errors, load.refused) == ([], [])
            finally:
                operator.close()

        restored = str(run(fresh_database(server, migrated=False)))
        try:
            subprocess.run(
                [pg_restore, "--no-owner", f"--dbname={restored}", str(dump)],
                check=True,
                capture_output=True,
                timeout=300,
            )
            with hosts(restored, 1, {}, "--workers", "1") as (again,):
                operator = Operator(again.base_url, again.admin_token)
                on_restored = replace(merchant, base_url=again.base_url)
                try:
                    check = operator.get("/admin/ledger/check")
                    assert check.json() == {"ok": True, "violations": []}, check.text
                    for payout_id in acknowledged.values():
                        got = on_restored.get(f"/v3/payouts/{payout_id}")
                        assert got.status_code == 200, got.text
                    # Each key still replays its answer rather than making a new payout.
                    for key, payout_id in list(acknowledged.items())[:20]:
                        replay = on_restored.signed_post("/v3/payouts", body, idempotency_key=key)
                        assert replay.status_code == 202, replay.text
                        assert replay.json()["id"] == payout_id
                finally:
                    on_restored.http.close()
                    merchant.http.close()
                    operator.close()
        finally:
            run(drop_database(server, restored))
            shutil.rmtree(dump.parent, ignore_errors=True)
