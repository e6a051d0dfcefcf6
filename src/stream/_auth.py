"""Bearer-token auth: an HS256 JWT names the user (``sub``), the org and the role."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, get_args

import jwt
from litestar.connection import ASGIConnection
from litestar.middleware.authentication import (
    AbstractAuthenticationMiddleware,
    AuthenticationResult,
)
from litestar.types import ASGIApp

from stream._errors import ApiError
from tools import UserRole, caller_token

ROLES: tuple[str, ...] = get_args(UserRole)
# /metrics: 404 unless enabled; / and /web/: the web chat page and its assets
PUBLIC_PATHS = [
    "^/healthz$",
    "^/metrics$",
    "^/schema",
    "^/$",
    "^/web/",
    "^/v1/hooks/",
    "^/v1/event-hooks/",
]
"""Routes without a bearer token (``/v1/hooks/``, ``/v1/event-hooks/``: a
signature is the credential)."""


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: a user in an org, with a role."""

    user_id: str
    org_id: str
    role: UserRole

    @property
    def sees_whole_org(self) -> bool:
        return self.role in ("owner", "staff")


@dataclass(frozen=True, slots=True)
class TokenConfig:
    secret: str
    algorithm: str = "HS256"


def sign_claims(claims: dict[str, Any], key: str) -> str:
    """An HS256 JWT of ``claims`` under ``key``: an OpenAPI toolset's per-call identity,
    signed with that toolset's own secret (never this server's)."""
    return jwt.encode(claims, key, algorithm="HS256")


def mint_token(config: TokenConfig, *, user: str, org: str, role: UserRole, ttl_s: int) -> str:
    """A signed token for ``user`` in ``org``, valid for ``ttl_s`` seconds."""
    if role not in ROLES:
        raise ValueError(f"Unknown role {role!r}; use one of {', '.join(ROLES)}")
    now = int(time.time())
    claims = {"sub": user, "org": org, "role": role, "iat": now, "exp": now + ttl_s}
    return jwt.encode(claims, config.secret, algorithm=config.algorithm)


def _unauthorized(message: str) -> ApiError:
    return ApiError(401, "unauthorized", message)


def _refusal(exc: jwt.PyJWTError, algorithm: str) -> str:
    """Why PyJWT refused a token, and what to do about it."""
    mint = "mint a new one with `bosun token`"
    match exc:
        case jwt.InvalidSignatureError():
            return (
                "The token's signature did not verify with this server's secret: it was "
                "signed by another server or with another BOSUN_JWT_SECRET; "
                f"{mint} under this server's BOSUN_JWT_SECRET"
            )
        case jwt.ExpiredSignatureError():
            return f"The token has expired (its exp is in the past); {mint}"
        case jwt.MissingRequiredClaimError(claim=claim):
            return f"The token lacks the {claim!r} claim; {mint}"
        case jwt.InvalidAlgorithmError():
            return f"The token is not signed with {algorithm}, the algorithm of this server; {mint}"
        case jwt.ImmatureSignatureError():
            return (
                "The token is not valid yet (its iat or nbf is in the future); check the clocks "
                f"of this server and of the machine that minted it, or {mint}"
            )
        case jwt.DecodeError():
            return f"The bearer token is not a well-formed JWT ({exc}); send it whole, or {mint}"
        case _:
            return f"The token was refused ({exc}); {mint}"


def decode_token(config: TokenConfig, token: str) -> Principal:
    """Verify the signature and expiry and read the claims.

    Raises ``ApiError`` 401 ``unauthorized`` whose message says what was wrong: a bad
    signature, an expired or malformed token, a missing claim or an unknown role.
    """
    try:
        claims = jwt.decode(
            token,
            config.secret,
            algorithms=[config.algorithm],
            options={"require": ["sub", "exp"]},
        )
    except jwt.PyJWTError as exc:
        raise _unauthorized(_refusal(exc, config.algorithm)) from exc
    user, org, role = claims.get("sub"), claims.get("org"), claims.get("role")
    if not (isinstance(user, str) and user and isinstance(org, str) and org):
        raise _unauthorized(
            "The token lacks a user (sub) or an org claim; mint one with "
            "`bosun token --user U --org O`"
        )
    if role not in ROLES:
        raise _unauthorized(f"The token's role {role!r} is not one of {', '.join(ROLES)}")
    return Principal(user_id=user, org_id=org, role=role)


class BearerAuthMiddleware(AbstractAuthenticationMiddleware):
    """Puts the caller's ``Principal`` in ``request.user`` on every route but the public ones."""

    def __init__(self, app: ASGIApp, config: TokenConfig) -> None:
        super().__init__(app, exclude=PUBLIC_PATHS)
        self._config = config

    async def authenticate_request(
        self, connection: ASGIConnection[Any, Any, Any, Any]
    ) -> AuthenticationResult:
        scheme, _, token = connection.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise _unauthorized(
                "Missing bearer token: send Authorization: Bearer <JWT> (`bosun token` prints one)"
            )
        principal = decode_token(self._config, token.strip())
        # The turns this request starts inherit it: what a ``forward`` OpenAPI toolset sends.
        caller_token.set(token.strip())
        return AuthenticationResult(user=principal, auth=token)


ROLES_HELP = f"one of {', '.join(ROLES)}"
