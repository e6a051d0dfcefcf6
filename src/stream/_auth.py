"""Bearer-token auth: an HS256 JWT names the user (``sub``), the org and the role."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal, get_args

import jwt
from litestar.connection import ASGIConnection
from litestar.exceptions import NotAuthorizedException
from litestar.middleware.authentication import (
    AbstractAuthenticationMiddleware,
    AuthenticationResult,
)
from litestar.types import ASGIApp

Role = Literal["owner", "staff", "member"]
ROLES: tuple[str, ...] = get_args(Role)
# /metrics: 404 unless enabled; / and /web/: the web chat page and its assets
PUBLIC_PATHS = ["^/healthz$", "^/metrics$", "^/schema", "^/$", "^/web/"]


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: a user in an org, with a role."""

    user_id: str
    org_id: str
    role: Role

    @property
    def sees_whole_org(self) -> bool:
        return self.role in ("owner", "staff")


@dataclass(frozen=True, slots=True)
class TokenConfig:
    secret: str
    algorithm: str = "HS256"


def mint_token(config: TokenConfig, *, user: str, org: str, role: Role, ttl_s: int) -> str:
    """A signed token for ``user`` in ``org``, valid for ``ttl_s`` seconds."""
    if role not in ROLES:
        raise ValueError(f"Unknown role {role!r}; use one of {', '.join(ROLES)}")
    now = int(time.time())
    claims = {"sub": user, "org": org, "role": role, "iat": now, "exp": now + ttl_s}
    return jwt.encode(claims, config.secret, algorithm=config.algorithm)


def decode_token(config: TokenConfig, token: str) -> Principal:
    """Verify the signature and expiry and read the claims; raises ``NotAuthorizedException``."""
    try:
        claims = jwt.decode(
            token,
            config.secret,
            algorithms=[config.algorithm],
            options={"require": ["sub", "exp"]},
        )
    except jwt.PyJWTError as exc:
        raise NotAuthorizedException(detail="invalid token") from exc
    user, org, role = claims.get("sub"), claims.get("org"), claims.get("role")
    if not (isinstance(user, str) and user and isinstance(org, str) and org):
        raise NotAuthorizedException(detail="token lacks sub or org")
    if role not in ROLES:
        raise NotAuthorizedException(detail="token has an unknown role")
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
            raise NotAuthorizedException(detail="missing bearer token")
        principal = decode_token(self._config, token.strip())
        return AuthenticationResult(user=principal, auth=token)


ROLES_HELP = f"one of {', '.join(ROLES)}"
