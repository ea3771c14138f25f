"""ES512 detached JWS in the format of the public `truelayer-signing` libraries (tl_version 2).

Kept apart from the server's own code on purpose: the testing kit talks to Bankrail over HTTP
only, as a merchant's code would.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)

__all__ = [
    "SignatureInvalid",
    "generate_key_pem",
    "public_key_pem",
    "sign",
    "verify_with_jwks",
]

_P521_BYTES = 66
_ECDSA_SHA512 = ec.ECDSA(hashes.SHA512())


class SignatureInvalid(ValueError):
    """A signature that is malformed, made with an unknown key, or does not match."""


def _b64(raw: bytes) -> bytes:
    return base64.urlsafe_b64encode(raw).rstrip(b"=")


def _unb64(text: str) -> bytes:
    data = text.encode()
    try:
        return base64.urlsafe_b64decode(data + b"=" * (-len(data) % 4))
    except ValueError as exc:
        raise SignatureInvalid("not valid base64url") from exc


def _payload(method: str, path: str, headers: Sequence[tuple[str, str]], body: bytes) -> bytes:
    lines = [f"{method.upper()} {path}\n"] + [f"{name}: {value}\n" for name, value in headers]
    return "".join(lines).encode() + body


def generate_key_pem() -> str:
    """A new P-521 private key, PKCS#8 PEM."""
    key = ec.generate_private_key(ec.SECP521R1())
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def _private_key(pem: str) -> ec.EllipticCurvePrivateKey:
    key = serialization.load_pem_private_key(pem.encode(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != "secp521r1":
        raise ValueError("the signing key must be an EC P-521 private key")
    return key


def public_key_pem(private_key_pem: str) -> str:
    """The SubjectPublicKeyInfo PEM of a private key's public half."""
    return (
        _private_key(private_key_pem)
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


def sign(
    private_key_pem: str,
    kid: str,
    *,
    method: str,
    path: str,
    headers: Sequence[tuple[str, str]],
    body: bytes,
) -> str:
    """`BASE64URL(header)..BASE64URL(r||s)` over `METHOD path\\n`, each header as
    `Name: value\\n`, then the body."""
    fields = {
        "alg": "ES512",
        "kid": kid,
        "tl_version": "2",
        "tl_headers": ",".join(name for name, _ in headers),
    }
    header_b64 = _b64(json.dumps(fields, separators=(",", ":")).encode())
    signing_input = header_b64 + b"." + _b64(_payload(method, path, headers, body))
    der = _private_key(private_key_pem).sign(signing_input, _ECDSA_SHA512)
    r, s = decode_dss_signature(der)
    raw = r.to_bytes(_P521_BYTES, "big") + s.to_bytes(_P521_BYTES, "big")
    return (header_b64 + b".." + _b64(raw)).decode()


def _jwk_key(jwk: Mapping[str, Any]) -> ec.EllipticCurvePublicKey:
    x = int.from_bytes(_unb64(str(jwk["x"])), "big")
    y = int.from_bytes(_unb64(str(jwk["y"])), "big")
    return ec.EllipticCurvePublicNumbers(x, y, ec.SECP521R1()).public_key()


def verify_with_jwks(
    jwks: Mapping[str, Any],
    signature: str,
    *,
    method: str,
    path: str,
    headers: Mapping[str, str],
    body: bytes,
) -> None:
    """Check a webhook's signature against a JWKS; `headers` maps lower-cased names to
    values. Raises SignatureInvalid."""
    parts = signature.split(".")
    if len(parts) != 3 or parts[1] != "":
        raise SignatureInvalid("not a detached JWS")
    try:
        header = json.loads(_unb64(parts[0]))
    except ValueError as exc:
        raise SignatureInvalid("the JWS header is not JSON") from exc
    if not isinstance(header, dict) or header.get("alg") != "ES512":
        raise SignatureInvalid("the JWS header does not name ES512")
    kid = header.get("kid")
    jwk = next((k for k in jwks.get("keys", []) if k.get("kid") == kid), None)
    if jwk is None:
        raise SignatureInvalid(f"no key with kid {kid!r} in the JWKS")
    names = [n.strip() for n in str(header.get("tl_headers", "")).split(",") if n.strip()]
    covered = []
    for name in names:
        if name.lower() not in headers:
            raise SignatureInvalid(f"the signed header {name} is missing")
        covered.append((name, headers[name.lower()]))
    raw = _unb64(parts[2])
    if len(raw) != 2 * _P521_BYTES:
        raise SignatureInvalid("the signature has the wrong length")
    der = encode_dss_signature(
        int.from_bytes(raw[:_P521_BYTES], "big"), int.from_bytes(raw[_P521_BYTES:], "big")
    )
    signing_input = parts[0].encode() + b"." + _b64(_payload(method, path, covered, body))
    try:
        _jwk_key(jwk).verify(der, signing_input, _ECDSA_SHA512)
    except InvalidSignature as exc:
        raise SignatureInvalid("the signature does not match") from exc
