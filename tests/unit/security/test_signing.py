"""Unit tests for bankrail.security.signing (ES512 detached-JWS request signatures).

The canonical vectors in tests/fixtures/signing come from the public `truelayer-signing`
project; the interop tests check byte-compatibility with that library in both directions.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import orjson
import pytest
import truelayer_signing
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from hypothesis import given, settings
from hypothesis import strategies as st
from truelayer_signing import HttpMethod, extract_jws_header
from truelayer_signing.errors import TlSigningException
from truelayer_signing.verify import TlVerifier

from bankrail.security.signing import (
    ParsedSignature,
    SignatureError,
    b64url_decode,
    b64url_encode,
    generate_private_key,
    load_public_key,
    parse_signature,
    private_key_pem,
    public_jwk,
    public_key_pem,
    sign_request,
    signature_digest,
    verify_request,
)

FIXTURES = Path(__file__).parents[2] / "fixtures" / "signing"

KID = "45fc75cf-5649-4134-84b3-192c2c78e990"
PRIVATE_PEM = (FIXTURES / "ec512-private.pem").read_text()
PUBLIC_PEM = (FIXTURES / "ec512-public.pem").read_text()
JWKS = json.loads((FIXTURES / "jwks.json").read_text())
TL_SIGNATURE = (FIXTURES / "tl-signature.txt").read_text().strip()
WEBHOOK_SIGNATURE = (FIXTURES / "webhook-signature.txt").read_text().strip()

PRIVATE_KEY = serialization.load_pem_private_key(PRIVATE_PEM.encode(), password=None)
assert isinstance(PRIVATE_KEY, ec.EllipticCurvePrivateKey)
PUBLIC_KEY = load_public_key(PUBLIC_PEM)

# The tl-signature.txt vector.
TL_METHOD = "POST"
TL_PATH = "/merchant_accounts/a61acaef-ee05-4077-92f3-25543a11bd8d/sweeping"
TL_HEADER_NAME = "Idempotency-Key"
TL_HEADER_VALUE = "idemp-2076717c-9005-4811-a321-9e0787fa0382"
TL_HEADERS = {TL_HEADER_NAME.lower(): TL_HEADER_VALUE}
TL_BODY = b'{"currency":"GBP","max_amount_in_minor":5000000,"name":"Foo???"}'

# The webhook-signature.txt vector.
WH_JKU = "https://webhooks.truelayer.com/.well-known/jwks"
WH_PATH = "/tl-webhook"
WH_TIMESTAMP = "2021-11-29T11:42:55Z"
WH_HEADERS = {
    "x-tl-webhook-timestamp": WH_TIMESTAMP,
    "content-type": "application/json",
}
WH_BODY = b'{"event_type":"example","event_id":"18b2842b-a57b-4887-a0a6-d3c7c36f1020"}'


def _verify_tl(
    signature: str = TL_SIGNATURE,
    *,
    method: str = TL_METHOD,
    path: str = TL_PATH,
    headers: dict[str, str] | None = None,
    body: bytes = TL_BODY,
    required_headers: tuple[str, ...] | list[str] = (),
) -> None:
    verify_request(
        PUBLIC_KEY,
        parse_signature(signature),
        method=method,
        path=path,
        headers=TL_HEADERS if headers is None else headers,
        body=body,
        required_headers=required_headers,
    )


def _split(signature: str) -> tuple[str, str]:
    header_b64, sep, sig_b64 = signature.partition("..")
    assert sep == ".."
    return header_b64, sig_b64


def _with_header(signature: str, fields: object) -> str:
    """The same signature bytes under a replaced JOSE header."""
    _, sig_b64 = _split(signature)
    return b64url_encode(orjson.dumps(fields)).decode() + ".." + sig_b64


def _der_to_raw(der: bytes) -> bytes:
    r, s = decode_dss_signature(der)
    return r.to_bytes(66, "big") + s.to_bytes(66, "big")


def _body_only_signature(body: bytes, kid: str = "k") -> str:
    """A standard detached JWS (RFC 7515 appendix F) with no tl_version, signed by hand."""
    header_b64 = b64url_encode(b'{"alg":"ES512","kid":"' + kid.encode() + b'"}')
    der = PRIVATE_KEY.sign(header_b64 + b"." + b64url_encode(body), ec.ECDSA(hashes.SHA512()))
    return (header_b64 + b".." + b64url_encode(_der_to_raw(der))).decode()


def _coordinate(value: str) -> int:
    return int.from_bytes(b64url_decode(value), "big")


# --- 1. the canonical request vector verifies ------------------------------------------------


def test_canonical_vector_verifies() -> None:
    _verify_tl()


def test_canonical_vector_parses() -> None:
    parsed = parse_signature(TL_SIGNATURE)
    assert parsed.header.alg == "ES512"
    assert parsed.header.kid == KID
    assert parsed.header.tl_version == "2"
    assert parsed.header.tl_headers == ("Idempotency-Key",)
    assert parsed.header.jku is None
    assert parsed.header.raw_b64 == _split(TL_SIGNATURE)[0].encode()
    assert len(parsed.signature) == 132


@pytest.mark.parametrize(
    "request_header_name", ["Idempotency-Key", "IDEMPOTENCY-KEY", "idempotency-KEY"]
)
def test_canonical_vector_verifies_whatever_the_request_header_case(
    request_header_name: str,
) -> None:
    # A caller lower-cases incoming header names, as verify_request requires.
    incoming = {request_header_name: TL_HEADER_VALUE, "X-Other": "ignored"}
    _verify_tl(headers={name.lower(): value for name, value in incoming.items()})


@pytest.mark.parametrize("required", ["Idempotency-Key", "idempotency-key", "IDEMPOTENCY-KEY"])
def test_canonical_vector_verifies_with_required_header_in_any_case(required: str) -> None:
    _verify_tl(required_headers=[required])


def test_canonical_vector_verifies_with_trailing_slash_added() -> None:
    _verify_tl(path=TL_PATH + "/")


def test_canonical_vector_verifies_with_lower_case_method() -> None:
    _verify_tl(method="post")


def test_canonical_vector_ignores_unsigned_extra_headers() -> None:
    _verify_tl(headers={**TL_HEADERS, "content-type": "application/json", "x-extra": "1"})


def test_surrounding_whitespace_in_signature_is_tolerated() -> None:
    _verify_tl(f"  {TL_SIGNATURE}\n")


# --- 2. the canonical request vector fails when anything changes --------------------------------


def test_changed_body_byte_fails() -> None:
    body = bytearray(TL_BODY)
    body[10] ^= 0x01
    with pytest.raises(SignatureError, match="does not match"):
        _verify_tl(body=bytes(body))


def test_appended_body_byte_fails() -> None:
    with pytest.raises(SignatureError, match="does not match"):
        _verify_tl(body=TL_BODY + b" ")


def test_empty_body_fails() -> None:
    with pytest.raises(SignatureError, match="does not match"):
        _verify_tl(body=b"")


@pytest.mark.parametrize(
    "path",
    [
        "/merchant_accounts/a61acaef-ee05-4077-92f3-25543a11bd8d/sweepin",
        "/merchant_accounts/a61acaef-ee05-4077-92f3-25543a11bd8d/sweeping//",
        "/merchant_accounts/a61acaef-ee05-4077-92f3-25543a11bd8e/sweeping",
        "/MERCHANT_ACCOUNTS/a61acaef-ee05-4077-92f3-25543a11bd8d/sweeping",
        "/merchant_accounts/a61acaef-ee05-4077-92f3-25543a11bd8d/sweeping?x=1",
        "merchant_accounts/a61acaef-ee05-4077-92f3-25543a11bd8d/sweeping",
    ],
)
def test_changed_path_fails(path: str) -> None:
    with pytest.raises(SignatureError, match="does not match"):
        _verify_tl(path=path)


@pytest.mark.parametrize("method", ["GET", "PUT", "PATCH", "DELETE", "POS"])
def test_changed_method_fails(method: str) -> None:
    with pytest.raises(SignatureError, match="does not match"):
        _verify_tl(method=method)


@pytest.mark.parametrize(
    "value",
    [
        "idemp-2076717c-9005-4811-a321-9e0787fa0383",
        "IDEMP-2076717C-9005-4811-A321-9E0787FA0382",
        TL_HEADER_VALUE + " ",
        "",
    ],
)
def test_changed_header_value_fails(value: str) -> None:
    with pytest.raises(SignatureError, match="does not match"):
        _verify_tl(headers={"idempotency-key": value})


def test_signed_header_missing_from_request_fails() -> None:
    with pytest.raises(SignatureError, match="Idempotency-Key is missing"):
        _verify_tl(headers={"content-type": "application/json"})


def test_signed_header_present_only_under_non_lowercased_key_is_missing() -> None:
    # The documented contract: header names must be lower-cased by the caller.
    with pytest.raises(SignatureError, match="missing from the request"):
        _verify_tl(headers={"Idempotency-Key": TL_HEADER_VALUE})


@pytest.mark.parametrize(
    "required",
    [["X-Request-Id"], ["Idempotency-Key", "X-Request-Id"], ["Idempotency"]],
)
def test_required_header_not_signed_fails(required: list[str]) -> None:
    with pytest.raises(SignatureError, match="required header\\(s\\) not signed"):
        # The request carries the header, but the signature does not cover it.
        _verify_tl(headers={**TL_HEADERS, "x-request-id": "abc"}, required_headers=required)


@pytest.mark.parametrize("cut", [1, 4, 88, 175])
def test_truncated_signature_fails(cut: int) -> None:
    with pytest.raises(SignatureError):
        _verify_tl(TL_SIGNATURE[:-cut])


def test_signature_with_extra_bytes_fails() -> None:
    header_b64, sig_b64 = _split(TL_SIGNATURE)
    longer = b64url_encode(b64url_decode(sig_b64) + b"\x00").decode()
    with pytest.raises(SignatureError, match="132 bytes"):
        _verify_tl(f"{header_b64}..{longer}")


def test_signature_with_flipped_bit_fails() -> None:
    header_b64, sig_b64 = _split(TL_SIGNATURE)
    raw = bytearray(b64url_decode(sig_b64))
    raw[100] ^= 0x40
    with pytest.raises(SignatureError, match="does not match"):
        _verify_tl(f"{header_b64}..{b64url_encode(bytes(raw)).decode()}")


def test_signature_with_r_and_s_swapped_fails() -> None:
    header_b64, sig_b64 = _split(TL_SIGNATURE)
    raw = b64url_decode(sig_b64)
    swapped = b64url_encode(raw[66:] + raw[:66]).decode()
    with pytest.raises(SignatureError, match="does not match"):
        _verify_tl(f"{header_b64}..{swapped}")


@pytest.mark.parametrize(
    "signature_part",
    ["A", "!!!!", "%%%%%%%%", "AAAAA", "@@@" * 50],
)
def test_garbage_signature_base64_fails(signature_part: str) -> None:
    header_b64, _ = _split(TL_SIGNATURE)
    with pytest.raises(SignatureError):
        _verify_tl(f"{header_b64}..{signature_part}")


@pytest.mark.parametrize("header_part", ["A", "!!!!", "e30x", "*" * 20])
def test_garbage_header_base64_fails(header_part: str) -> None:
    _, sig_b64 = _split(TL_SIGNATURE)
    with pytest.raises(SignatureError):
        parse_signature(f"{header_part}..{sig_b64}")


@pytest.mark.parametrize("alg", ["ES256", "ES384", "RS512", "HS512", "none", "es512", None])
def test_header_with_other_alg_fails(alg: str | None) -> None:
    fields = {"alg": alg, "kid": KID, "tl_version": "2", "tl_headers": TL_HEADER_NAME}
    with pytest.raises(SignatureError, match="alg must be ES512"):
        parse_signature(_with_header(TL_SIGNATURE, fields))


def test_header_without_alg_fails() -> None:
    fields = {"kid": KID, "tl_version": "2", "tl_headers": TL_HEADER_NAME}
    with pytest.raises(SignatureError, match="alg must be ES512"):
        parse_signature(_with_header(TL_SIGNATURE, fields))


@pytest.mark.parametrize("raw_header", [b"not json", b"{", b"\xff\xfe\x00", b""])
def test_non_json_header_fails(raw_header: bytes) -> None:
    _, sig_b64 = _split(TL_SIGNATURE)
    with pytest.raises(SignatureError):
        parse_signature(b64url_encode(raw_header).decode() + ".." + sig_b64)


@pytest.mark.parametrize("fields", [["ES512"], "ES512", 512, None])
def test_non_object_json_header_fails(fields: object) -> None:
    with pytest.raises(SignatureError, match="not a JSON object"):
        parse_signature(_with_header(TL_SIGNATURE, fields))


@pytest.mark.parametrize("kid", [None, "", 42])
def test_header_without_valid_kid_fails(kid: object) -> None:
    fields: dict[str, object] = {"alg": "ES512", "tl_version": "2", "tl_headers": ""}
    if kid is not None:
        fields["kid"] = kid
    with pytest.raises(SignatureError, match="no kid"):
        parse_signature(_with_header(TL_SIGNATURE, fields))


@pytest.mark.parametrize("version", ["1", "3", 2, ""])
def test_header_with_unsupported_tl_version_fails(version: object) -> None:
    fields = {"alg": "ES512", "kid": KID, "tl_version": version, "tl_headers": ""}
    with pytest.raises(SignatureError, match="tl_version"):
        parse_signature(_with_header(TL_SIGNATURE, fields))


@pytest.mark.parametrize("tl_headers", [["Idempotency-Key"], 1, {"a": "b"}])
def test_header_with_non_string_tl_headers_fails(tl_headers: object) -> None:
    fields = {"alg": "ES512", "kid": KID, "tl_version": "2", "tl_headers": tl_headers}
    with pytest.raises(SignatureError, match="tl_headers must be a string"):
        parse_signature(_with_header(TL_SIGNATURE, fields))


def test_re_encoded_header_with_same_fields_does_not_verify() -> None:
    # The signature covers the header bytes exactly as sent; reformatted JSON is a new header.
    fields = json.loads(b64url_decode(_split(TL_SIGNATURE)[0]))
    spaced = json.dumps(fields).encode()  # with ", " and ": " separators
    _, sig_b64 = _split(TL_SIGNATURE)
    with pytest.raises(SignatureError, match="does not match"):
        _verify_tl(b64url_encode(spaced).decode() + ".." + sig_b64)


def test_header_claiming_different_signed_headers_fails() -> None:
    fields = {"alg": "ES512", "kid": KID, "tl_version": "2", "tl_headers": ""}
    with pytest.raises(SignatureError, match="does not match"):
        _verify_tl(_with_header(TL_SIGNATURE, fields))


@pytest.mark.parametrize(
    "value",
    [
        "",
        "..",
        "nodots",
        "header.signature",
        "a.b.c",
        TL_SIGNATURE.replace("..", "."),
        _split(TL_SIGNATURE)[0] + "..",
        ".." + _split(TL_SIGNATURE)[1],
        _split(TL_SIGNATURE)[0] + ".payload." + _split(TL_SIGNATURE)[1],
        TL_SIGNATURE + ".extra",
    ],
)
def test_value_that_is_not_a_detached_jws_fails(value: str) -> None:
    with pytest.raises(SignatureError):
        parse_signature(value)


def test_signature_error_is_a_value_error() -> None:
    assert issubclass(SignatureError, ValueError)


def test_other_key_does_not_verify_canonical_vector() -> None:
    other = generate_private_key().public_key()
    with pytest.raises(SignatureError, match="does not match"):
        verify_request(
            other,
            parse_signature(TL_SIGNATURE),
            method=TL_METHOD,
            path=TL_PATH,
            headers=TL_HEADERS,
            body=TL_BODY,
        )


# --- 3. the webhook vector ------------------------------------------------------------------


def _verify_webhook(
    *, path: str = WH_PATH, headers: dict[str, str] = WH_HEADERS, body: bytes = WH_BODY
) -> None:
    verify_request(
        PUBLIC_KEY,
        parse_signature(WEBHOOK_SIGNATURE),
        method="POST",
        path=path,
        headers=headers,
        body=body,
        required_headers=["X-Tl-Webhook-Timestamp"],
    )


def test_webhook_vector_verifies() -> None:
    _verify_webhook()


def test_webhook_vector_verifies_with_trailing_slash() -> None:
    _verify_webhook(path=WH_PATH + "/")


def test_webhook_vector_parse_exposes_jku_and_tl_headers() -> None:
    parsed = parse_signature(WEBHOOK_SIGNATURE)
    assert parsed.header.jku == WH_JKU
    assert parsed.header.kid == KID
    assert parsed.header.tl_version == "2"
    assert parsed.header.tl_headers == ("X-Tl-Webhook-Timestamp", "Content-Type")


def test_webhook_vector_fails_with_changed_timestamp() -> None:
    with pytest.raises(SignatureError, match="does not match"):
        _verify_webhook(headers={**WH_HEADERS, "x-tl-webhook-timestamp": "2021-11-29T11:42:56Z"})


def test_webhook_vector_fails_without_content_type() -> None:
    with pytest.raises(SignatureError, match="Content-Type is missing"):
        _verify_webhook(headers={"x-tl-webhook-timestamp": WH_TIMESTAMP})


def test_webhook_vector_fails_with_changed_body() -> None:
    with pytest.raises(SignatureError, match="does not match"):
        _verify_webhook(body=WH_BODY.replace(b"example", b"examplf"))


# --- 4. interop with the truelayer-signing library ----------------------------------------------


def test_truelayer_signature_verifies_with_bankrail() -> None:
    signature = (
        truelayer_signing.sign_with_pem(KID, PRIVATE_PEM)
        .set_method(HttpMethod.POST)
        .set_path(TL_PATH)
        .add_header(TL_HEADER_NAME, TL_HEADER_VALUE)
        .add_header("X-Custom", "abc")
        .set_body(TL_BODY.decode())
        .sign()
    )
    parsed = parse_signature(signature)
    assert parsed.header.tl_headers == (TL_HEADER_NAME, "X-Custom")
    headers = {"idempotency-key": TL_HEADER_VALUE, "x-custom": "abc"}
    _verify_tl(signature, headers=headers, required_headers=["idempotency-key", "x-custom"])
    with pytest.raises(SignatureError, match="does not match"):
        _verify_tl(signature, headers={**headers, "x-custom": "abd"})


def test_truelayer_signature_with_jku_and_upper_case_header_verifies_with_bankrail() -> None:
    signature = (
        truelayer_signing.sign_with_pem(KID, PRIVATE_PEM)
        .set_method(HttpMethod.PUT)
        .set_path("/payouts/1")
        .add_header("X-SVC-WEBHOOK-TIMESTAMP", WH_TIMESTAMP)
        .set_jku("https://example.com/jwks")
        .set_body('{"a":"\u00e9"}')
        .sign()
    )
    parsed = parse_signature(signature)
    assert parsed.header.jku == "https://example.com/jwks"
    verify_request(
        PUBLIC_KEY,
        parsed,
        method="PUT",
        path="/payouts/1/",
        headers={"x-svc-webhook-timestamp": WH_TIMESTAMP},
        body='{"a":"\u00e9"}'.encode(),
        required_headers=["X-Svc-Webhook-Timestamp"],
    )


def test_bankrail_signature_verifies_with_truelayer_pem() -> None:
    signature = sign_request(
        PRIVATE_KEY,
        KID,
        method="POST",
        path=TL_PATH,
        headers=[(TL_HEADER_NAME, TL_HEADER_VALUE)],
        body=TL_BODY,
    )
    (
        truelayer_signing.verify_with_pem(PUBLIC_PEM)
        .set_method(HttpMethod.POST)
        .set_path(TL_PATH)
        .add_header(TL_HEADER_NAME, TL_HEADER_VALUE)
        .add_required_header(TL_HEADER_NAME)
        .set_body(TL_BODY.decode())
        .verify(signature)
    )
    with pytest.raises(TlSigningException):
        (
            truelayer_signing.verify_with_pem(PUBLIC_PEM)
            .set_method(HttpMethod.POST)
            .set_path(TL_PATH)
            .add_header(TL_HEADER_NAME, TL_HEADER_VALUE)
            .set_body(TL_BODY.decode() + " ")
            .verify(signature)
        )


def test_bankrail_webhook_signature_verifies_with_truelayer_jwks() -> None:
    jku = "https://bankrail.example/.well-known/jwks"
    headers = [("X-SVC-Webhook-Timestamp", WH_TIMESTAMP), ("Content-Type", "application/json")]
    signature = sign_request(
        PRIVATE_KEY, KID, method="POST", path="/hook", headers=headers, body=WH_BODY, jku=jku
    )
    jws_header = extract_jws_header(signature)
    assert jws_header.jku == jku
    assert jws_header.kid == KID
    assert jws_header.tl_headers == "X-SVC-Webhook-Timestamp,Content-Type"

    jwks = {"keys": [public_jwk(PUBLIC_KEY, KID)]}

    def verifier() -> TlVerifier:
        return (
            truelayer_signing.verify_with_jwks(jwks, extract_jws_header(signature))
            .set_method(HttpMethod.POST)
            .set_path("/hook")
            .add_header("X-SVC-Webhook-Timestamp", WH_TIMESTAMP)
            .add_header("Content-Type", "application/json")
        )

    verifier().set_body(WH_BODY.decode()).verify(signature)
    with pytest.raises(TlSigningException):
        verifier().set_body(WH_BODY.decode().replace("example", "exampl3")).verify(signature)

    # And bankrail itself accepts it, exposing the jku.
    parsed = parse_signature(signature)
    assert parsed.header.jku == jku
    verify_request(
        PUBLIC_KEY,
        parsed,
        method="POST",
        path="/hook",
        headers={name.lower(): value for name, value in headers},
        body=WH_BODY,
        required_headers=["x-svc-webhook-timestamp"],
    )


def test_bankrail_signature_header_is_the_compact_json_truelayer_rebuilds() -> None:
    signature = sign_request(
        PRIVATE_KEY,
        KID,
        method="POST",
        path="/p",
        headers=[("A", "1"), ("B", "2")],
        body=b"",
        jku="https://j",
    )
    header_json = b64url_decode(_split(signature)[0])
    assert header_json == (
        b'{"alg":"ES512","kid":"' + KID.encode() + b'","tl_version":"2",'
        b'"tl_headers":"A,B","jku":"https://j"}'
    )
    # Without a jku the field is omitted entirely.
    no_jku = sign_request(PRIVATE_KEY, KID, method="POST", path="/p", headers=[], body=b"")
    assert b64url_decode(_split(no_jku)[0]) == (
        b'{"alg":"ES512","kid":"' + KID.encode() + b'","tl_version":"2","tl_headers":""}'
    )
    assert "=" not in signature
    assert len(b64url_decode(_split(signature)[1])) == 132


def test_bankrail_signature_without_headers_verifies_both_ways() -> None:
    signature = sign_request(PRIVATE_KEY, KID, method="DELETE", path="/x", headers=[], body=b"")
    verify_request(
        PUBLIC_KEY, parse_signature(signature), method="DELETE", path="/x", headers={}, body=b""
    )
    (
        truelayer_signing.verify_with_pem(PUBLIC_PEM)
        .set_method(HttpMethod.DELETE)
        .set_path("/x")
        .verify(signature)
    )


def test_generated_key_round_trips_through_pem_and_truelayer() -> None:
    key = generate_private_key()
    assert key.curve.name == "secp521r1"
    priv_pem = private_key_pem(key)
    pub_pem = public_key_pem(key.public_key())
    assert priv_pem.startswith("-----BEGIN PRIVATE KEY-----")
    assert pub_pem.startswith("-----BEGIN PUBLIC KEY-----")
    loaded = load_public_key(pub_pem)
    assert loaded.public_numbers() == key.public_key().public_numbers()

    tl_sig = (
        truelayer_signing.sign_with_pem("gen", priv_pem)
        .set_method(HttpMethod.POST)
        .set_path("/gen")
        .add_header("Idempotency-Key", "k1")
        .set_body("{}")
        .sign()
    )
    verify_request(
        loaded,
        parse_signature(tl_sig),
        method="POST",
        path="/gen",
        headers={"idempotency-key": "k1"},
        body=b"{}",
    )
    ours = sign_request(
        key, "gen", method="POST", path="/gen", headers=[("Idempotency-Key", "k1")], body=b"{}"
    )
    (
        truelayer_signing.verify_with_pem(pub_pem)
        .set_method(HttpMethod.POST)
        .set_path("/gen")
        .add_header("Idempotency-Key", "k1")
        .set_body("{}")
        .verify(ours)
    )


def test_jwks_fixture_key_equals_public_jwk() -> None:
    ours = public_jwk(load_public_key(PUBLIC_PEM), KID)
    fixture = next(key for key in JWKS["keys"] if key["kty"] == "EC")
    assert ours["kty"] == fixture["kty"] == "EC"
    assert ours["crv"] == fixture["crv"] == "P-521"
    assert ours["kid"] == fixture["kid"] == KID
    assert ours["alg"] == fixture["alg"] == "ES512"
    # Same curve point. The fixture's x drops the leading zero octet (65 bytes), whereas
    # RFC 7518 §6.2.1.2 requires the full 66-octet coordinate for P-521, which public_jwk emits;
    # so the coordinates are compared as numbers, and their encoded lengths checked.
    assert _coordinate(ours["x"]) == _coordinate(fixture["x"])
    assert _coordinate(ours["y"]) == _coordinate(fixture["y"])
    assert ours["y"] == fixture["y"]
    assert len(b64url_decode(ours["x"])) == 66
    assert len(b64url_decode(ours["y"])) == 66
    assert "=" not in ours["x"] + ours["y"]


def test_jwks_fixture_verifies_canonical_vector_with_truelayer() -> None:
    (
        truelayer_signing.verify_with_jwks(JWKS, extract_jws_header(WEBHOOK_SIGNATURE))
        .set_method(HttpMethod.POST)
        .set_path(WH_PATH)
        .add_header("X-Tl-webhook-Timestamp", WH_TIMESTAMP)
        .add_header("Content-Type", "application/json")
        .set_body(WH_BODY.decode())
        .verify(WEBHOOK_SIGNATURE)
    )


# --- 5. body-only (standard detached JWS) form ----------------------------------------------------


def _verify_body_only(signature: str, body: bytes, *, allow: bool = True) -> None:
    verify_request(
        PUBLIC_KEY,
        parse_signature(signature),
        method="POST",
        path="/anything",
        headers={},
        body=body,
        allow_body_only=allow,
    )


def test_body_only_signature_parses_without_tl_version() -> None:
    parsed = parse_signature(_body_only_signature(b"{}"))
    assert parsed.header.tl_version is None
    assert parsed.header.tl_headers == ()
    assert parsed.header.kid == "k"


@pytest.mark.parametrize("body", [b'{"amount":100}', b"", TL_BODY, bytes(range(256))])
def test_body_only_signature_verifies_when_allowed(body: bytes) -> None:
    _verify_body_only(_body_only_signature(body), body)


def test_body_only_signature_fails_for_changed_body() -> None:
    signature = _body_only_signature(b'{"amount":100}')
    with pytest.raises(SignatureError, match="does not match the request body"):
        _verify_body_only(signature, b'{"amount":101}')


def test_body_only_signature_rejected_when_not_allowed() -> None:
    body = b'{"amount":100}'
    signature = _body_only_signature(body)
    with pytest.raises(SignatureError, match="no tl_version"):
        _verify_body_only(signature, body, allow=False)


def test_body_only_is_the_default_off() -> None:
    body = b"{}"
    with pytest.raises(SignatureError, match="no tl_version"):
        verify_request(
            PUBLIC_KEY,
            parse_signature(_body_only_signature(body)),
            method="POST",
            path="/",
            headers={},
            body=body,
        )


def test_allow_body_only_still_checks_v2_signatures_in_full() -> None:
    # allow_body_only does not loosen the check of a tl_version 2 signature.
    signature = sign_request(PRIVATE_KEY, KID, method="POST", path="/p", headers=[], body=b"{}")
    verify_request(
        PUBLIC_KEY,
        parse_signature(signature),
        method="POST",
        path="/p",
        headers={},
        body=b"{}",
        allow_body_only=True,
    )
    with pytest.raises(SignatureError, match="does not match"):
        verify_request(
            PUBLIC_KEY,
            parse_signature(signature),
            method="POST",
            path="/q",
            headers={},
            body=b"{}",
            allow_body_only=True,
        )


# --- 6. load_public_key -----------------------------------------------------------------


def _pem(key: ec.EllipticCurvePublicKey | rsa.RSAPublicKey) -> bytes:
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def test_load_public_key_accepts_fixture_as_str_and_bytes() -> None:
    from_str = load_public_key(PUBLIC_PEM)
    from_bytes = load_public_key(PUBLIC_PEM.encode())
    assert from_str.curve.name == "secp521r1"
    assert from_str.public_numbers() == from_bytes.public_numbers()
    assert from_str.public_numbers() == PRIVATE_KEY.public_key().public_numbers()


def test_load_public_key_rejects_p256() -> None:
    pem = _pem(ec.generate_private_key(ec.SECP256R1()).public_key())
    with pytest.raises(ValueError, match="P-521"):
        load_public_key(pem)


def test_load_public_key_rejects_p384() -> None:
    pem = _pem(ec.generate_private_key(ec.SECP384R1()).public_key())
    with pytest.raises(ValueError, match="P-521"):
        load_public_key(pem)


def test_load_public_key_rejects_rsa() -> None:
    pem = _pem(rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key())
    with pytest.raises(ValueError, match="P-521"):
        load_public_key(pem.decode())


@pytest.mark.parametrize(
    "garbage",
    [
        "",
        "not a pem",
        b"\x00\x01\x02",
        "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n",
        PUBLIC_PEM.replace("MIGb", "MIGc"),
    ],
)
def test_load_public_key_rejects_garbage(garbage: str | bytes) -> None:
    with pytest.raises(ValueError, match="not a PEM-encoded public key"):
        load_public_key(garbage)


def test_load_public_key_rejects_private_key_pem() -> None:
    with pytest.raises(ValueError, match="not a PEM-encoded public key"):
        load_public_key(PRIVATE_PEM)


# --- base64url helpers -------------------------------------------------------------------


@pytest.mark.parametrize("raw", [b"", b"f", b"fo", b"foo", b"\xfb\xff\xfe", bytes(range(256))])
def test_b64url_round_trip_without_padding(raw: bytes) -> None:
    encoded = b64url_encode(raw)
    assert b"=" not in encoded
    assert b"+" not in encoded
    assert b"/" not in encoded
    assert encoded == base64.urlsafe_b64encode(raw).rstrip(b"=")
    assert b64url_decode(encoded) == raw
    assert b64url_decode(encoded.decode()) == raw
    assert b64url_decode(base64.urlsafe_b64encode(raw)) == raw  # padded input


def test_b64url_decode_raises_signature_error_on_impossible_length() -> None:
    with pytest.raises(SignatureError, match="base64url"):
        b64url_decode("A")


# --- 7. property: sign then verify round-trips; any body byte flip fails ------------------------

_PRINTABLE = st.characters(min_codepoint=0x20, max_codepoint=0x7E)
_PATH_CHARS = st.characters(exclude_categories=("Cs", "Cc", "Zl", "Zp"), exclude_characters="?#")


@settings(max_examples=30, deadline=None, database=None)
@given(
    body=st.binary(min_size=1, max_size=512),
    path=st.text(_PATH_CHARS, max_size=40).map(lambda tail: "/" + tail),
    idempotency_key=st.text(_PRINTABLE, max_size=60),
    custom=st.text(_PRINTABLE, max_size=60),
    method=st.sampled_from(["POST", "PUT", "PATCH", "DELETE", "GET"]),
    data=st.data(),
)
def test_property_sign_verify_round_trip_and_body_flip_fails(
    body: bytes,
    path: str,
    idempotency_key: str,
    custom: str,
    method: str,
    data: st.DataObject,
) -> None:
    headers = [("Idempotency-Key", idempotency_key), ("X-Custom", custom)]
    signature = sign_request(PRIVATE_KEY, KID, method=method, path=path, headers=headers, body=body)
    parsed = parse_signature(signature)
    assert isinstance(parsed, ParsedSignature)
    assert parsed.header.tl_headers == ("Idempotency-Key", "X-Custom")
    request_headers = {name.lower(): value for name, value in headers}
    verify_request(
        PUBLIC_KEY,
        parsed,
        method=method,
        path=path,
        headers=request_headers,
        body=body,
        required_headers=["idempotency-key"],
    )

    index = data.draw(st.integers(min_value=0, max_value=len(body) - 1), label="index")
    mask = data.draw(st.integers(min_value=1, max_value=255), label="mask")
    tampered = bytearray(body)
    tampered[index] ^= mask
    with pytest.raises(SignatureError, match="does not match"):
        verify_request(
            PUBLIC_KEY,
            parsed,
            method=method,
            path=path,
            headers=request_headers,
            body=bytes(tampered),
        )


# --- the digest that names an accepted signature ---------------------------------------------

# The order of P-521's base point (SEC 2, 2.6.1), written otherwise than the module does.
P521_N = (1 << 521) - 1 - 0x5AE79787C40D069948033FEB708F65A2FC44A36477663B851449048E16EC79BF6


def _with_raw(signature: str, r: int, s: int) -> str:
    header_b64, _ = _split(signature)
    return header_b64 + ".." + b64url_encode(r.to_bytes(66, "big") + s.to_bytes(66, "big")).decode()


def test_a_signature_rewritten_as_r_and_n_minus_s_verifies_and_has_the_same_digest() -> None:
    raw = parse_signature(TL_SIGNATURE).signature
    r, s = int.from_bytes(raw[:66], "big"), int.from_bytes(raw[66:], "big")
    rewritten = _with_raw(TL_SIGNATURE, r, P521_N - s)
    assert rewritten != TL_SIGNATURE
    _verify_tl(rewritten)  # ECDSA accepts it: a replay could use it instead of the original
    assert signature_digest(parse_signature(rewritten)) == signature_digest(
        parse_signature(TL_SIGNATURE)
    )


def test_every_signature_has_its_own_digest() -> None:
    signed = [
        sign_request(PRIVATE_KEY, KID, method="POST", path=TL_PATH, headers=[], body=TL_BODY)
        for _ in range(3)
    ]
    digests = {signature_digest(parse_signature(signature)) for signature in signed}
    assert len(digests) == 3
    assert all(len(digest) == 32 for digest in digests)
