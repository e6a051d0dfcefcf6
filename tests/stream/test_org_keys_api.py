"""Bring your own key: owners store a provider key; the org's turns then use it."""

from __future__ import annotations

from cryptography.fernet import Fernet

from conftest import ServerFactory
from helpers import stream_turn
from providers import FunctionModel, ModelRequest
from turn import TurnModels

SECRET_KEY = Fernet.generate_key().decode()


def _models() -> TurnModels:
    def with_key(spec: str, api_key: str) -> FunctionModel:
        return FunctionModel(lambda _r: f"{spec} billed to key ...{api_key[-4:]}")

    def server_key(_request: ModelRequest) -> str:
        return "billed to the server key"

    return TurnModels(
        executor=FunctionModel(server_key),
        specs={"executor": "openai:gpt-4.1-mini"},
        build=with_key,
    )


async def test_an_org_key_is_used_for_that_org_only(make_server: ServerFactory) -> None:
    async with make_server(_models(), secrets_key=SECRET_KEY) as server:
        client = server.client
        owner = server.auth(user="olga", role="owner")
        stored = await client.put(
            "/v1/org/keys/openai", json={"api_key": "sk-org-secret-abcd"}, headers=owner
        )
        assert stored.status_code == 200, stored.text
        assert stored.json()["last4"] == "abcd"
        assert "sk-org-secret" not in stored.text

        async def answer(**claims: str) -> str:
            frames = await stream_turn(client, {"message": "hi"}, server.auth(**claims))
            return "".join(f.data["delta"] for f in frames if f.event == "text_delta")

        assert await answer(user="mia") == "openai:gpt-4.1-mini billed to key ...abcd"
        assert await answer(user="zed", org="other-org") == "billed to the server key"

        listed = await client.get("/v1/org/keys", headers=server.auth(role="staff"))
        assert [(k["provider"], k["last4"]) for k in listed.json()] == [("openai", "abcd")]
        assert "sk-org-secret" not in listed.text
        other = await client.get("/v1/org/keys", headers=server.auth(org="other-org", role="owner"))
        assert other.json() == []

        assert (await client.delete("/v1/org/keys/openai", headers=owner)).status_code == 204
        assert await answer(user="mia") == "billed to the server key"
        gone = await client.delete("/v1/org/keys/openai", headers=owner)
        assert gone.status_code == 404


async def test_only_owners_store_keys_and_members_cannot_list(make_server: ServerFactory) -> None:
    async with make_server(_models(), secrets_key=SECRET_KEY) as server:
        body = {"api_key": "sk-org-secret-abcd"}
        for role in ("staff", "member"):
            response = await server.client.put(
                "/v1/org/keys/openai", json=body, headers=server.auth(role=role)
            )
            assert response.status_code == 403
            assert response.json()["error"]["code"] == "forbidden"
        listed = await server.client.get("/v1/org/keys", headers=server.auth(role="member"))
        assert listed.status_code == 403
        unknown = await server.client.put(
            "/v1/org/keys/gemini", json=body, headers=server.auth(role="owner")
        )
        assert unknown.status_code == 400
        assert unknown.json()["error"]["code"] == "invalid_request"


async def test_without_a_server_key_storing_is_refused_clearly(make_server: ServerFactory) -> None:
    async with make_server(_models()) as server:
        response = await server.client.put(
            "/v1/org/keys/openai",
            json={"api_key": "sk-org-secret-abcd"},
            headers=server.auth(role="owner"),
        )
        assert response.status_code == 400
        assert "BOSUN_SECRETS_KEY" in response.json()["error"]["message"]
