"""ES512 detached-JWS request signatures in the format of the public `truelayer-signing` libraries.

A signature is `BASE64URL(header)..BASE64URL(r||s)`. With `tl_version` "2" the signed payload is
`METHOD SP path LF`, then `Name: value LF` for each header named in `tl_headers` (in that
order), then the raw body. Without `tl_version` (accepted only where a route allows it), the
standard detached-JWS input `BASE64URL(header).BASE64URL(body)` is signed.

This module is pure: no HTTP framework, no database.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import orjson
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)

__all__ = [
    "JwsHeader",
    "SignatureError",
    "b64url_decode",
    "b64url_encode",
    "generate_private_key",
    "load_public_key",
    "mismatch",
    "parse_signature",
    "private_key_pem",
    "public_jwk",
    "public_key_pem",
    "sign_request",
    "signature_digest",
    "verification_inputs",
    "verify_any",
    "verify_request",
]

_P521_BYTES = 66
# The order n of P-521's base point (SEC 2, 2.6.1): (r, s) and (r, n - s) are both valid
# signatures of one message.
_P521_ORDER = int(
    (
        "01FF FFFFFFFF FFFFFFFF FFFFFFFF FFFFFFFF FFFFFFFF FFFFFFFF FFFFFFFF FFFFFFFA"
        " 51868783 BF2F966B 7FCC0148 F709A5D0 3BB5C9B8 899C47AE BB6FB71E 91386409"
    ).replace(" ", ""),
    16,
)
_ECDSA_SHA512 = ec.ECDSA(hashes.SHA512())


class SignatureError(ValueError):
    """The signature is malformed, does not match, or lacks a required header."""


def b64url_encode(raw: bytes) -> bytes:
    """Base64url without padding."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=")


def b64url_decode(text: str | bytes) -> bytes:
    """Decode base64url with or without padding; raises SignatureError on bad input."""
    data = text.encode() if isinstance(text, str) else text
    try:
        return base64.urlsafe_b64decode(data + b"=" * (-len(data) % 4))
    except (binascii.Error, ValueError) as exc:
        raise SignatureError("signature is not valid base64url") from exc


@dataclass(frozen=True)
class JwsHeader:
    """The JOSE header of a signature."""

    alg: str
    kid: str
    tl_version: str | None
    tl_headers: tuple[str, ...]
    jku: str | None
    raw_b64: bytes


@dataclass(frozen=True)
class ParsedSignature:
    """A signature split into its header and raw r||s bytes."""

    header: JwsHeader
    signature: bytes


def parse_signature(value: str) -> ParsedSignature:
    """Split and decode a detached JWS; raises SignatureError when it is not one."""
    header_b64, sep, signature_b64 = value.strip().partition("..")
    if not sep or not header_b64 or not signature_b64 or "." in signature_b64:
        raise SignatureError("signature is not a detached JWS (header..signature)")
    try:
        fields = orjson.loads(b64url_decode(header_b64))
    except orjson.JSONDecodeError as exc:
        raise SignatureError("JWS header is not JSON") from exc
    if not isinstance(fields, dict):
        raise SignatureError("JWS header is not a JSON object")
    if fields.get("alg") != "ES512":
        raise SignatureError("JWS alg must be ES512")
    kid = fields.get("kid")
    if not isinstance(kid, str) or not kid:
        raise SignatureError("JWS header has no kid")
    tl_version = fields.get("tl_version")
    if tl_version is not None and tl_version != "2":
        raise SignatureError("unsupported tl_version (expected 2)")
    tl_headers_raw = fields.get("tl_headers", "")
    if not isinstance(tl_headers_raw, str):
        raise SignatureError("tl_headers must be a string")
    jku = fields.get("jku")
    names = tuple(name.strip() for name in tl_headers_raw.split(",") if name.strip())
    header = JwsHeader(
        alg="ES512",
        kid=kid,
        tl_version=tl_version,
        tl_headers=names,
        jku=jku if isinstance(jku, str) else None,
        raw_b64=header_b64.encode(),
    )
    return ParsedSignature(header, b64url_decode(signature_b64))


def _signing_payload(
    method: str, path: str, headers: Iterable[tuple[str, str]], body: bytes
) -> bytes:
    lines = [f"{method.upper()} {path}\n"]
    lines.extend(f"{name}: {value}\n" for name, value in headers)
    return "".join(lines).encode() + body


def _raw_to_der(signature: bytes) -> bytes:
    if len(signature) != 2 * _P521_BYTES:
        raise SignatureError("signature must be 132 bytes (P-521 r||s)")
    r = int.from_bytes(signature[:_P521_BYTES], "big")
    s = int.from_bytes(signature[_P521_BYTES:], "big")
    return encode_dss_signature(r, s)


def signature_digest(parsed: ParsedSignature) -> bytes:
    """The SHA-256 that names a signature, the same for every encoding of it that verifies:
    computed from r and the lower of s and n - s (ECDSA accepts both, so a captured signature
    can be rewritten into another valid one), each reduced modulo the curve's order."""
    raw = parsed.signature
    r = int.from_bytes(raw[:_P521_BYTES], "big") % _P521_ORDER
    s = int.from_bytes(raw[_P521_BYTES:], "big") % _P521_ORDER
    s = min(s, _P521_ORDER - s)
    return hashlib.sha256(r.to_bytes(_P521_BYTES, "big") + s.to_bytes(_P521_BYTES, "big")).digest()


def verify_any(
    public_key: ec.EllipticCurvePublicKey, signature_der: bytes, inputs: Iterable[bytes]
) -> bool:
    """Whether the signature verifies over any one of `inputs` with the key."""
    for data in inputs:
        try:
            public_key.verify(signature_der, data, _ECDSA_SHA512)
        except InvalidSignature:
            continue
        return True
    return False


def verification_inputs(
    parsed: ParsedSignature,
    *,
    method: str,
    path: str,
    headers: Mapping[str, str],
    body: bytes,
    required_headers: Sequence[str] = (),
    allow_body_only: bool = False,
) -> tuple[bytes, tuple[bytes, ...]]:
    """The signature (DER) and the inputs it must verify over, any one of them, for the
    request to be signed; raises SignatureError when no key could make it verify.

    `headers` must map lower-cased header names to values. A path that differs from the
    signed one only by a trailing `/` verifies.
    """
    header = parsed.header
    der = _raw_to_der(parsed.signature)
    if header.tl_version is None:
        if not allow_body_only:
            raise SignatureError("JWS header has no tl_version")
        return der, (header.raw_b64 + b"." + b64url_encode(body),)
    signed_names = {name.lower() for name in header.tl_headers}
    missing = [name for name in required_headers if name.lower() not in signed_names]
    if missing:
        raise SignatureError(f"required header(s) not signed: {', '.join(missing)}")
    ordered: list[tuple[str, str]] = []
    for name in header.tl_headers:
        value = headers.get(name.lower())
        if value is None:
            raise SignatureError(f"signed header {name} is missing from the request")
        ordered.append((name, value))
    alternate = path[:-1] if path.endswith("/") and len(path) > 1 else path + "/"
    return der, tuple(
        header.raw_b64 + b"." + b64url_encode(_signing_payload(method, candidate, ordered, body))
        for candidate in (path, alternate)
    )


def mismatch(parsed: ParsedSignature) -> SignatureError:
    """The error of a well-formed signature that does not verify."""
    signed = "the request body" if parsed.header.tl_version is None else "the request"
    return SignatureError(
        f"signature does not match {signed}: it does not verify with key "
        f"{parsed.header.kid}: is this the key registered for this merchant?"
    )


def verify_request(
    public_key: ec.EllipticCurvePublicKey,
    parsed: ParsedSignature,
    *,
    method: str,
    path: str,
    headers: Mapping[str, str],
    body: bytes,
    required_headers: Sequence[str] = (),
    allow_body_only: bool = False,
) -> None:
    """Check a parsed signature over a request; raises SignatureError if it does not verify.

    `headers` must map lower-cased header names to values. A path that differs from the
    signed one only by a trailing `/` verifies.
    """
    der, inputs = verification_inputs(
        parsed,
        method=method,
        path=path,
        headers=headers,
        body=body,
        required_headers=required_headers,
        allow_body_only=allow_body_only,
    )
    if not verify_any(public_key, der, inputs):
        raise mismatch(parsed)


def sign_request(
    private_key: ec.EllipticCurvePrivateKey,
    kid: str,
    *,
    method: str,
    path: str,
    headers: Sequence[tuple[str, str]],
    body: bytes,
    jku: str | None = None,
) -> str:
    """Produce a tl_version 2 detached JWS over the request.

    The header is compact JSON with exactly `alg, kid, tl_version, tl_headers[, jku]` in that
    order, the form the public libraries rebuild when they verify.
    """
    fields: dict[str, str] = {
        "alg": "ES512",
        "kid": kid,
        "tl_version": "2",
        "tl_headers": ",".join(name for name, _ in headers),
    }
    if jku is not None:
        fields["jku"] = jku
    header_b64 = b64url_encode(orjson.dumps(fields))
    payload = _signing_payload(method, path, headers, body)
    der = private_key.sign(header_b64 + b"." + b64url_encode(payload), _ECDSA_SHA512)
    r, s = decode_dss_signature(der)
    raw = r.to_bytes(_P521_BYTES, "big") + s.to_bytes(_P521_BYTES, "big")
    return (header_b64 + b".." + b64url_encode(raw)).decode()


def load_public_key(pem: str | bytes) -> ec.EllipticCurvePublicKey:
    """Parse a PEM public key; it must be EC P-521. Raises ValueError otherwise."""
    data = pem.encode() if isinstance(pem, str) else pem
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise ValueError("not a PEM-encoded public key") from exc
    if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name != "secp521r1":
        raise ValueError("the key must be an EC P-521 (ES512) public key")
    return key


def generate_private_key() -> ec.EllipticCurvePrivateKey:
    """A new P-521 private key."""
    return ec.generate_private_key(ec.SECP521R1())


def private_key_pem(key: ec.EllipticCurvePrivateKey) -> str:
    """PKCS#8 PEM of a private key, unencrypted."""
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def public_key_pem(key: ec.EllipticCurvePublicKey) -> str:
    """SubjectPublicKeyInfo PEM of a public key."""
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()


def public_jwk(key: ec.EllipticCurvePublicKey, kid: str) -> dict[str, str]:
    """The key as a JWK (`kty EC, crv P-521, alg ES512, kid, x, y`)."""
    numbers = key.public_numbers()
    return {
        "kty": "EC",
        "crv": "P-521",
        "alg": "ES512",
        "kid": kid,
        "x": b64url_encode(numbers.x.to_bytes(_P521_BYTES, "big")).decode(),
        "y": b64url_encode(numbers.y.to_bytes(_P521_BYTES, "big")).decode(),
    }
