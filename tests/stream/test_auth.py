"""A refused token gets a 401 whose message says what was wrong with it and what to do."""

from __future__ import annotations

import time

import jwt

from bosun.settings import Settings
from conftest import JWT_SECRET, Server
from turn import TurnModels

CLAIMS = {"sub": "ada", "org": "acme", "role": "member", "exp": 2**40}


def _bearer(claims: dict[str, object], secret: str = JWT_SECRET, algorithm: str = "HS256") -> str:
    return "Bearer " + jwt.encode(claims, secret, algorithm=algorithm)


async def test_each_refused_token_says_why(sqlite_url: str) -> None:
    refused = {
        "missing": None,
        "not a bearer": "Basic dXNlcjpwYXNz",
        "bad signature": _bearer(CLAIMS, "another-servers-secret-" + "y" * 20),
        "expired": _bearer({**CLAIMS, "exp": int(time.time()) - 10}),
        "malformed": "Bearer not-a-jwt",
        "no exp": _bearer({k: v for k, v in CLAIMS.items() if k != "exp"}),
        "no org": _bearer({k: v for k, v in CLAIMS.items() if k != "org"}),
        "unknown role": _bearer({**CLAIMS, "role": "admin"}),
        "other algorithm": _bearer(CLAIMS, JWT_SECRET * 2, algorithm="HS512"),
        "not yet valid": _bearer({**CLAIMS, "iat": 2**39}),
    }
    settings = Settings(database_url=sqlite_url, jwt_secret=JWT_SECRET)
    messages: dict[str, str] = {}
    async with Server(settings, TurnModels()) as server:
        for why, authorization in refused.items():
            headers = {} if authorization is None else {"Authorization": authorization}
            response = await server.client.get("/v1/sessions", headers=headers)
            assert response.status_code == 401, (why, response.text)
            error = response.json()["error"]
            assert (error["code"], len(error["trace_id"])) == ("unauthorized", 32)
            messages[why] = error["message"]

    assert messages == {
        "missing": (
            "Missing bearer token: send Authorization: Bearer <JWT> (`bosun token` prints one)"
        ),
        "not a bearer": (
            "Missing bearer token: send Authorization: Bearer <JWT> (`bosun token` prints one)"
        ),
        "bad signature": (
            "The token's signature did not verify with this server's secret: it was signed by "
            "another server or with another BOSUN_JWT_SECRET; mint a new one with `bosun token` "
            "under this server's BOSUN_JWT_SECRET"
        ),
        "expired": (
            "The token has expired (its exp is in the past); mint a new one with `bosun token`"
        ),
        "malformed": (
            "The bearer token is not a well-formed JWT (Not enough segments); send it whole, "
            "or mint a new one with `bosun token`"
        ),
        "no exp": "The token lacks the 'exp' claim; mint a new one with `bosun token`",
        "no org": (
            "The token lacks a user (sub) or an org claim; mint one with "
            "`bosun token --user U --org O`"
        ),
        "unknown role": "The token's role 'admin' is not one of owner, staff, member",
        "other algorithm": (
            "The token is not signed with HS256, the algorithm of this server; "
            "mint a new one with `bosun token`"
        ),
        "not yet valid": (
            "The token is not valid yet (its iat or nbf is in the future); check the clocks of "
            "this server and of the machine that minted it, or mint a new one with `bosun token`"
        ),
    }
