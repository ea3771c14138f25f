"""The request's headers as signature verification and idempotency read them: one value per
name, taken from the raw ASGI headers, and a 400 for a name that was sent more than once.

A header repeated in a request has no one value: HTTP libraries disagree on which copy they
report (Starlette's `request.headers[name]` the first, a dict built from `.items()` the last).
A signature verified over one copy while the idempotency store keys on another lets a captured
request be replayed under a fresh key; so every name that the signature covers, or that the
idempotency layer keys on, must appear once, and both read it from the same `RequestHeaders`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from typing import Any

from bankrail.core.problems import InvalidParameters

__all__ = ["RepeatedHeader", "RequestHeaders", "request_headers"]

# Where, in the ASGI scope, the request's parsed headers are kept once built.
_SCOPE_KEY = "bankrail.request_headers"


class RepeatedHeader(InvalidParameters):
    """A header whose one value the request needs was sent more than once: 400."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"The {name} header is repeated; send it once.",
            {name: ["header sent more than once; send it once"]},
        )


class RequestHeaders(Mapping[str, str]):
    """A request's headers by lower-cased name, built from the raw ASGI header list.

    Reading a name that was sent more than once (`[name]`, `.get(name)`) raises RepeatedHeader
    (400) instead of choosing one of the copies, so no reader can see a different value than
    another; `in`, iteration and `len` see each distinct name once and never raise.
    """

    def __init__(self, raw: Iterable[tuple[bytes, bytes]]) -> None:
        values: dict[str, str] = {}
        repeated: set[str] = set()
        for raw_name, raw_value in raw:
            name = raw_name.decode("latin-1").lower()
            if name in values:
                repeated.add(name)
            else:
                values[name] = raw_value.decode("latin-1")
        self._values = values
        self._repeated = frozenset(repeated)

    def __getitem__(self, name: str) -> str:
        key = name.lower()
        if key in self._repeated:
            raise RepeatedHeader(_display(name))
        return self._values[key]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._values

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def require_once(self, names: Iterable[str]) -> None:
        """Raise RepeatedHeader for the first of `names` that was sent more than once."""
        for name in names:
            if name.lower() in self._repeated:
                raise RepeatedHeader(_display(name))


def _display(name: str) -> str:
    """The name as a client wrote it in its docs: `Idempotency-Key`, not `idempotency-key`."""
    return name if name != name.lower() else "-".join(p.capitalize() for p in name.split("-"))


def request_headers(scope: MutableMapping[str, Any]) -> RequestHeaders:
    """The request's `RequestHeaders`, built once per request and kept in its ASGI scope, so
    that the signature check and the idempotency layer read the very same values."""
    headers = scope.get(_SCOPE_KEY)
    if not isinstance(headers, RequestHeaders):
        headers = RequestHeaders(scope.get("headers") or ())
        scope[_SCOPE_KEY] = headers
    return headers
