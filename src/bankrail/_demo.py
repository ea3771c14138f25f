"""The demo merchant of `bankrail init` and `bankrail serve --demo`: created once per data
directory (client credentials, a signing key pair, GBP and EUR accounts), kept in
demo-credentials.json, and described for a developer."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bankrail.config import Settings

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePrivateKey

    from bankrail.db.pool import Connection
    from bankrail.merchants.models import MerchantAccount

__all__ = ["DEMO_CREDENTIALS", "DEMO_KEY", "create_demo", "describe"]

DEMO_CREDENTIALS = "demo-credentials.json"
DEMO_KEY = "demo-signing-key.pem"


async def create_demo(settings: Settings, dsn: str, force: bool) -> dict[str, Any]:
    """The demo merchant of `settings.data_dir`, created when there is none (or `force`),
    with the base URL of these settings (the port may differ from the run that created it)."""
    demo = await _stored_or_new_demo(settings, dsn, force)
    return {**demo, "base_url": settings.public_url}


async def _stored_or_new_demo(settings: Settings, dsn: str, force: bool) -> dict[str, Any]:
    from bankrail.db.migrations import migrate
    from bankrail.db.pool import create_pool
    from bankrail.merchants import service
    from bankrail.security import signing
    from bankrail.security.secret_files import write_secret_file
    from bankrail.security.service_keys import ADMIN_TOKEN_FILE, ensure_admin_token

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    saved = settings.data_dir / DEMO_CREDENTIALS
    pool = await create_pool(
        dsn, min_size=1, max_size=2, statement_cache_size=settings.db_statement_cache_size
    )
    try:
        async with pool.acquire() as conn:
            await migrate(conn)
            _, generated = await ensure_admin_token(conn, settings.admin_token, settings.data_dir)
            if saved.exists() and not force:
                demo: dict[str, Any] = json.loads(saved.read_text())
                if await service.merchant_exists(conn, uuid.UUID(demo["merchant_id"])):
                    return demo
            made = await _create_demo_merchant(conn)
    finally:
        await pool.close()
    key_path = settings.data_dir / DEMO_KEY
    write_secret_file(key_path, signing.private_key_pem(made.key))
    admin_file = settings.data_dir / ADMIN_TOKEN_FILE
    admin_token = settings.admin_token or (
        admin_file.read_text().strip() if admin_file.exists() else generated
    )
    demo = {
        "base_url": settings.public_url,
        "merchant_id": str(made.merchant_id),
        "client_id": made.client_id,
        "client_secret": made.secret,
        "signing_key_id": made.kid,
        "private_key_path": str(key_path.resolve()),
        "admin_token": admin_token,
        "merchant_accounts": [
            {
                "id": str(a.id),
                "currency": a.currency,
                "account_identifiers": a.identifiers.as_list(),
            }
            for a in made.accounts
        ],
    }
    write_secret_file(saved, json.dumps(demo, indent=2) + "\n")
    return demo


@dataclass(frozen=True)
class _DemoMerchant:
    """What creating the demo merchant made: its client credentials, signing key pair (the
    private key, and the id its public key is registered under) and accounts."""

    merchant_id: uuid.UUID
    client_id: str
    secret: str
    key: EllipticCurvePrivateKey
    kid: str
    accounts: list[MerchantAccount]


async def _create_demo_merchant(conn: Connection) -> _DemoMerchant:
    """A new demo merchant with a client, a signing key and GBP and EUR accounts, in one
    transaction."""
    from datetime import UTC, datetime

    from bankrail.merchants import service
    from bankrail.security import signing

    now = datetime.now(UTC)
    async with conn.transaction():
        merchant_id = await service.create_merchant(conn, "Demo Merchant", now)
        client_id, secret = await service.create_client(conn, merchant_id, ["payments"], now)
        key = signing.generate_private_key()
        kid = await service.register_signing_key(
            conn, merchant_id, signing.public_key_pem(key.public_key()), None, now
        )
        accounts = [
            await service.create_merchant_account(conn, merchant_id, c, None, now)
            for c in ("GBP", "EUR")
        ]
    return _DemoMerchant(merchant_id, client_id, secret, key, kid, accounts)


def describe(demo: dict[str, Any]) -> str:
    """What `init` prints of the demo merchant: its credentials and accounts, and how to get
    a token with them."""
    accounts = "\n".join(
        f"    {a['currency']}  {a['id']}  "
        + ", ".join(
            i.get("iban") or f"{i['sort_code']} {i['account_number']}"
            for i in a["account_identifiers"]
        )
        for a in demo["merchant_accounts"]
    )
    base = demo["base_url"]
    return f"""Bankrail demo merchant
  base URL          {base}
  client_id         {demo["client_id"]}
  client_secret     {demo["client_secret"]}
  signing key id    {demo["signing_key_id"]}
  private key (PEM) {demo["private_key_path"]}
  operator token    {demo["admin_token"] or "(set by BANKRAIL_ADMIN_TOKEN or in admin-token)"}
  merchant accounts
{accounts}

Get a token and list the accounts:
  TOKEN=$(curl -s {base}/connect/token -d grant_type=client_credentials \\
      -d client_id={demo["client_id"]} -d client_secret={demo["client_secret"]} \\
      | python3 -c 'import json,sys; print(json.load(sys.stdin)["access_token"])')
  curl -s {base}/v3/merchant-accounts -H "Authorization: Bearer $TOKEN"
"""
