"""The signing keys of OIDC issuers, as STS would fetch them, and token signature checks.

Before it answers `AssumeRoleWithWebIdentity`, STS reads the token issuer's discovery
document (`<iss>/.well-known/openid-configuration`), fetches its `jwks_uri` and verifies the
token's signature with the key its header names. The issuers of the local world (kube-sim
playing an EKS cluster's service-account issuer, or a test) are not reachable over HTTPS
from here, so they publish their JWKS to this module instead:

    POST /joiner-local/oidc/keys   {"issuer": "https://...", "jwks": {"keys": [JWK, ...]}}
    GET  /joiner-local/oidc/keys   every issuer and its key ids

Keys are merged by `kid` (an issuer rotating keys keeps serving the old one, as a JWKS
does). They are not account state, so `/moto-api/reset` keeps them: an issuer is outside the
account, and kube-sim registers once when it learns its issuer.

`verify(token)` is what `iam_enforce` calls: RS256/384/512 and ES256/384/512, the
algorithms STS accepts; any other, an issuer with no keys, an unknown `kid` or a signature
that does not verify is refused as STS refuses it (`InvalidIdentityToken`).
"""

from __future__ import annotations

import base64
import json
import threading
from typing import Any

_lock = threading.Lock()
# issuer (without trailing slash) -> kid -> JWK
_keys: dict[str, dict[str, dict[str, Any]]] = {}

# STS's messages for a token it cannot verify.
NO_KEY = "Couldn't retrieve verification key from your identity provider,  please reference AssumeRoleWithWebIdentity documentation for requirements"
BAD_SIGNATURE = "The web identity token that was passed could not be validated by AWS. Get a new identity token from the identity provider and then retry the request."


class Invalid(Exception):
    """The token's signature cannot be verified; the message is STS's."""


def _b64(s: str) -> bytes:
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def _int(s: str) -> int:
    return int.from_bytes(_b64(s), "big")


def register(issuer: str, jwks: dict[str, Any]) -> int:
    """Adds the issuer's keys; returns how many it now has."""
    keys = jwks.get("keys")
    if not isinstance(keys, list) or not keys:
        raise ValueError("jwks.keys must be a non-empty list of JWKs")
    for k in keys:
        if not isinstance(k, dict) or not k.get("kid") or k.get("kty") not in ("RSA", "EC"):
            raise ValueError("every key needs a kid and kty RSA or EC")
        _public_key(k)  # refuse a key that does not parse now rather than at verification
    with _lock:
        by_kid = _keys.setdefault(issuer.rstrip("/"), {})
        for k in keys:
            by_kid[str(k["kid"])] = k
        return len(by_kid)


def issuers() -> dict[str, list[str]]:
    with _lock:
        return {iss: sorted(keys) for iss, keys in _keys.items()}


def _public_key(jwk: dict[str, Any]) -> Any:
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    if jwk["kty"] == "RSA":
        return rsa.RSAPublicNumbers(_int(jwk["e"]), _int(jwk["n"])).public_key()
    curve = {"P-256": ec.SECP256R1, "P-384": ec.SECP384R1, "P-521": ec.SECP521R1}.get(jwk.get("crv", ""))
    if curve is None:
        raise ValueError(f"unsupported EC curve {jwk.get('crv')!r}")
    return ec.EllipticCurvePublicNumbers(_int(jwk["x"]), _int(jwk["y"]), curve()).public_key()


def verify(token: str, issuer: str) -> None:
    """Raises `Invalid` unless the token is signed by a key `issuer` published."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, padding
    from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

    parts = token.split(".")
    if len(parts) != 3:
        raise Invalid(BAD_SIGNATURE)
    try:
        header = json.loads(_b64(parts[0]))
        signature = _b64(parts[2])
    except (ValueError, TypeError):
        raise Invalid(BAD_SIGNATURE)
    alg = str(header.get("alg", ""))
    hash_of = {"256": hashes.SHA256, "384": hashes.SHA384, "512": hashes.SHA512}
    if alg[:2] not in ("RS", "ES") or alg[2:] not in hash_of:
        raise Invalid(BAD_SIGNATURE)
    with _lock:
        jwk = _keys.get(issuer.rstrip("/"), {}).get(str(header.get("kid", "")))
    if jwk is None:
        raise Invalid(NO_KEY)
    if (alg[:2] == "RS") != (jwk["kty"] == "RSA"):
        raise Invalid(BAD_SIGNATURE)
    key = _public_key(jwk)
    signed = f"{parts[0]}.{parts[1]}".encode()
    digest = hash_of[alg[2:]]()
    try:
        if alg.startswith("RS"):
            key.verify(signature, signed, padding.PKCS1v15(), digest)
        else:
            # JWS carries ECDSA signatures as fixed-width r || s, not DER.
            half = len(signature) // 2
            if half == 0 or len(signature) % 2:
                raise Invalid(BAD_SIGNATURE)
            r = int.from_bytes(signature[:half], "big")
            s = int.from_bytes(signature[half:], "big")
            key.verify(encode_dss_signature(r, s), signed, ec.ECDSA(digest))
    except InvalidSignature:
        raise Invalid(BAD_SIGNATURE)


# ----------------------------------------------------------------------------------------
# HTTP.

PATH = "/joiner-local/oidc/keys"


def _respond(start_response: Any, code: int, doc: Any) -> list[bytes]:
    body = json.dumps(doc).encode()
    reason = {200: "OK", 400: "Bad Request", 405: "Method Not Allowed"}[code]
    start_response(f"{code} {reason}", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


def _handle(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    method = environ.get("REQUEST_METHOD", "GET")
    if method == "GET":
        return _respond(start_response, 200, {"issuers": issuers()})
    if method != "POST":
        return _respond(start_response, 405, {"message": f"{method} not allowed: use GET or POST"})
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    raw = environ["wsgi.input"].read(length) if length else b""
    try:
        body = json.loads(raw or b"{}")
        issuer = body.get("issuer")
        if not isinstance(issuer, str) or not issuer.startswith("https://"):
            raise ValueError("issuer must be an https:// URL")
        count = register(issuer, body.get("jwks") or {})
    except (ValueError, KeyError, TypeError) as e:
        return _respond(start_response, 400, {"message": f"cannot register keys: {e}"})
    return _respond(start_response, 200, {"issuer": issuer.rstrip("/"), "keys": count})


def install() -> None:
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication

    original_call = DomainDispatcherApplication.__call__

    def call(self: Any, environ: dict[str, Any], start_response: Any) -> Any:
        if environ.get("PATH_INFO", "") == PATH:
            return _handle(environ, start_response)
        return original_call(self, environ, start_response)

    DomainDispatcherApplication.__call__ = call  # type: ignore[method-assign]
