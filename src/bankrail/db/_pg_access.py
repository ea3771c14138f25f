"""Who may connect to the embedded PostgreSQL: the OS users that run Bankrail's server, by
peer authentication over a Unix socket that no other user can reach."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ["PG_SYSTEM_USER", "allowed_os_users", "own_uids", "write_access_rules"]

PG_SYSTEM_USER = "bankrail-pg"
_PEER_MAP = "bankrail"  # the pg_ident.conf map of the OS users allowed to connect
_ACCESS_RULES_HEADER = "# Written by Bankrail on every start; edits are lost.\n"


def own_uids() -> set[int]:
    """The uids that run Bankrail's server: this process's, and as root the PostgreSQL
    system user's."""
    uids = {os.geteuid()}
    if os.geteuid() == 0:
        import pwd

        with contextlib.suppress(KeyError):
            uids.add(pwd.getpwnam(PG_SYSTEM_USER).pw_uid)
    return uids


def allowed_os_users() -> list[str]:
    """The OS users that may connect: the one running Bankrail and, when that is root,
    the system user PostgreSQL runs as. Empty when this user has no name."""
    import pwd

    try:
        names = [pwd.getpwuid(os.geteuid()).pw_name]
    except KeyError:
        return []
    if os.geteuid() == 0:
        names.append(PG_SYSTEM_USER)
    return names


def write_access_rules(pgdata: Path) -> None:
    """`pg_hba.conf` and `pg_ident.conf`: the `postgres` role over the Unix socket, by
    peer authentication, for the allowed OS users only; everything else is rejected.

    A user without a name (an arbitrary uid in a container) cannot be matched by peer
    authentication; the rule is then `trust`, and the 0700 socket and directory are what
    keep other users out."""
    names = allowed_os_users()
    if names:
        ident = "".join(f'{_PEER_MAP} "{name}" postgres\n' for name in names)
        hba = f"local all postgres peer map={_PEER_MAP}\n"
    else:
        ident = ""
        hba = "local all postgres trust\n"
    for name, text in (("pg_ident.conf", ident), ("pg_hba.conf", hba)):
        path = pgdata / name
        path.write_text(_ACCESS_RULES_HEADER + text)
        path.chmod(0o600)
