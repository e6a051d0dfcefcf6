"""A request's model choice in the resolver and across a takeover (issue 27): ``requested``
runs every answering role over the agent's specs, ``planner`` the planner; a spec not
offered is refused naming its field; a turn taken over from a dead worker runs with the
choice its job recorded (and what is no longer offered falls back)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from events import SessionStarted, UserMessage
from providers import ScriptedModel
from store import Store
from turn import ModelNotAllowedError, TurnModels, TurnRunner
from turn._keeper import Keeper
from turn._models import ModelResolver

ORG = "acme"
PLAN = '{"strategy": "simple", "reasoning": "talk"}'


def named(name: str, *steps: str) -> ScriptedModel:
    return ScriptedModel(list(steps), repeat=True, name=name)


CHEAP, PLANNER = named("scripted:cheap", "cheap"), named("scripted:planner", PLAN)
BIG, AGENT, BIG_PLANNER = named("scripted:big", "big"), named("scripted:agent"), named("p", PLAN)
MODELS = TurnModels(
    executor=CHEAP,
    planner=PLANNER,
    specs={"executor": "scripted:cheap", "planner": "scripted:planner"},
    selectable={"scripted:big": BIG, "scripted:agent": AGENT, "scripted:big-planner": BIG_PLANNER},
)
AGENT_ROLES = {
    "executor": "scripted:agent",
    "merger": "scripted:agent",
    "planner": "scripted:agent",
}


async def test_the_request_wins_for_answering_roles_and_the_planner_keeps_its_own(
    store: Store,
) -> None:
    resolver = ModelResolver(MODELS, store.org_keys)

    chosen = await resolver.resolve(org_id=ORG, requested="scripted:big", roles=AGENT_ROLES)
    apart = await resolver.resolve(
        org_id=ORG, requested="scripted:big", planner="scripted:big-planner", roles=AGENT_ROLES
    )
    server = await resolver.resolve(org_id=ORG, requested="scripted:big")

    assert (chosen.answer, chosen.executor, chosen.planner) == (BIG, BIG, AGENT)
    assert (apart.answer, apart.executor, apart.planner) == (BIG, BIG, BIG_PLANNER)
    assert (server.answer, server.executor, server.planner) == (BIG, BIG, PLANNER)


@pytest.mark.parametrize("field", ["model", "planner_model"])
async def test_a_spec_not_offered_is_refused_naming_its_field(store: Store, field: str) -> None:
    resolver = ModelResolver(MODELS, store.org_keys)
    asked = {"requested": "scripted:nope"} if field == "model" else {"planner": "scripted:nope"}
    with pytest.raises(ModelNotAllowedError) as raised:
        await resolver.resolve(org_id=ORG, **{"requested": None, **asked})  # type: ignore[arg-type]
    assert (raised.value.spec, raised.value.field) == ("scripted:nope", field)


async def test_what_is_no_longer_offered_falls_back_and_the_rest_is_kept(store: Store) -> None:
    resolver = ModelResolver(MODELS, store.org_keys)
    gone = await resolver.resolve_offered(
        org_id=ORG, requested="scripted:gone", planner="scripted:big-planner",
        roles={"executor": "scripted:gone-too"},
    )  # fmt: skip
    assert (gone.answer, gone.executor, gone.planner) == (CHEAP, CHEAP, BIG_PLANNER)


async def test_a_taken_over_turn_runs_with_the_models_its_job_recorded(store: Store) -> None:
    session_id, turn_id = str(uuid.uuid4()), str(uuid.uuid4())
    await store.sessions.create(org_id=ORG, user_id="ada", session_id=session_id, title=None)
    job = {"org_id": ORG, "user_id": "ada", "role": "owner", "model": "scripted:big",
           "planner_model": "scripted:big-planner"}  # fmt: skip
    await store.log.open_turn(
        session_id,
        [SessionStarted(session_id=session_id, turn_id=turn_id),
         UserMessage(message_id="msg_1", text="hello")],
        turn_id=turn_id, trace_id="t", worker_id="dead:1",
        lease_until=datetime.now(UTC) - timedelta(seconds=1), job=job,
    )  # fmt: skip
    planner, answer = named("p", PLAN), named("scripted:big", "Hello from the big one.")
    models = TurnModels(
        executor=CHEAP, planner=PLANNER,
        selectable={"scripted:big": answer, "scripted:big-planner": planner},
    )  # fmt: skip
    runner = TurnRunner(store, turn_timeout_s=30, worker_id="live:2")
    keeper = Keeper(store, runner, ModelResolver(models, store.org_keys))

    assert await keeper.tick() == [turn_id]
    await runner.wait(turn_id)

    log = await store.log.read(session_id)
    assert "".join(e.data["delta"] for e in log if e.type == "text_delta") == (
        "Hello from the big one."
    )
    assert (len(planner.calls), len(answer.calls)) == (1, 1)
    [created] = [e.data for e in log if e.type == "plan_created"]
    assert created["models"] == {
        "planner": "p",
        "executor": "scripted:big",
        "merger": "scripted:big",
    }
