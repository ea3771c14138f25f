"""URL rules shared by the API and the pages."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit


def is_absolute_http_uri(uri: str) -> bool:
    """True for an absolute `http` or `https` URI with a host (unparsable URIs are not)."""
    try:
        parts = urlsplit(uri)
        host = parts.hostname
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(host)


def with_query(uri: str, **params: str) -> str:
    """`uri` with these query parameters added (existing ones are kept, in order)."""
    parts = urlsplit(uri)
    query = [*parse_qsl(parts.query, keep_blank_values=True), *params.items()]
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query), parts.fragment))
