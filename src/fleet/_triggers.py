"""Content triggers: what happens in the host app (a note, a comment, a reply) starts runs
of the agents it concerns, as Harmonic's server-side agents are started.

An event reaches an agent three ways, and starts at most one run of it (the strongest
reason wins: a mention, then a reply, then a subscription): an ``@handle`` in it (its
``mentions``, or read from its text), a reply to a resource one of the agent's runs
created, or a subscription of the agent that matches it. Nothing loops: an agent's own
event never starts it; each run counts its hops from a person's event, and an agent
takes none past its ``triggers.max_hops``; after an event on a resource starts it, the
agent takes no other event on that resource for ``triggers.cooldown_s``; its pause and
its ``runs_per_minute`` apply as to every run. Every skip is logged and answered.

The event is claimed by its id before it is routed, so a redelivery (on any worker, at
the same moment) starts nothing and answers with what the first delivery started.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal, cast

import structlog

from fleet._directory import Agent, AgentDirectory, AgentNotFoundError
from fleet._runs import AgentPausedError, AgentRateLimitedError, RunDispatcher, RunRequest
from store import ContentEventRecord, Cooldown, Store

TriggerKind = Literal["mention", "reply", "subscription"]
SkipReason = Literal["self", "hops", "cooldown", "paused", "rate_limited"]
PRECEDENCE: tuple[TriggerKind, ...] = ("mention", "reply", "subscription")
MAX_MENTIONS = 20
"""Handles an event may mention (given, or read from its text)."""
REPEAT_WAIT_S = 2.0
"""How long a redelivery waits for the first delivery's outcome before it answers with the
runs that delivery has started so far."""
_MENTION = re.compile(r"(?<![A-Za-z0-9_.+@-])@([A-Za-z][A-Za-z0-9_-]{1,39})")
_KEY_ROOM = 200 - len("event:")  # a run's idempotency key is at most 200 characters
_VERBS = {
    "created": "created",
    "updated": "updated",
    "deleted": "deleted",
    "commented": "commented on",
    "replied": "replied to",
}
_log = structlog.get_logger("bosun.triggers")


@dataclass(frozen=True, slots=True)
class Started:
    agent: str
    run_id: str
    kind: TriggerKind


@dataclass(frozen=True, slots=True)
class Skipped:
    agent: str
    kind: TriggerKind
    reason: SkipReason


@dataclass(frozen=True, slots=True, kw_only=True)
class Routing:
    """What one event started and skipped (``duplicate``: a redelivery, which starts none)."""

    event_id: str
    duplicate: bool = False
    runs: list[Started] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)

    def outcome(self) -> dict[str, Any]:
        """As stored with the event, and answered to a redelivery."""
        return {
            "runs": [asdict(started) for started in self.runs],
            "skipped": [asdict(skipped) for skipped in self.skipped],
        }


def mentioned(text: str | None, given: Sequence[str] | None) -> list[str]:
    """The handles an event mentions: ``given`` when the host says (``@`` optional), else
    the ``@handle`` words of ``text``; lower case, each once, at most ``MAX_MENTIONS``."""
    found = [h.removeprefix("@") for h in given] if given is not None else []
    if given is None and text:
        found = _MENTION.findall(text)
    return list(dict.fromkeys(handle.lower() for handle in found))[:MAX_MENTIONS]


def candidates(
    *, mentions: Iterable[str], repliers: Iterable[str], subscribers: Iterable[str]
) -> dict[str, TriggerKind]:
    """Each agent the event concerns, with its strongest reason (mention > reply >
    subscription): one run per agent and event."""
    kinds: dict[str, TriggerKind] = {}
    for kind, handles in zip(PRECEDENCE, (mentions, repliers, subscribers), strict=True):
        for handle in handles:
            kinds.setdefault(handle, kind)
    return kinds


def run_key(event_id: str) -> str:
    """The idempotency key of the runs an event starts (one per agent): ``event:<id>``, or
    for an id too long for the column, ``event:sha256:<its digest>``."""
    if len(event_id) <= _KEY_ROOM:
        return f"event:{event_id}"
    return f"event:sha256:{hashlib.sha256(event_id.encode()).hexdigest()}"


def _resource(kind: str, ident: str, title: str | None = None) -> str:
    return f"the {kind} {ident}" + (f" ({json.dumps(title, ensure_ascii=False)})" if title else "")


def trigger_task(event: ContentEventRecord, handle: str, kind: TriggerKind) -> str:
    """The run's task in plain words: who did what to which resource, and why it is this
    agent's business."""
    who = f"The {event.actor_type} {'@' if event.actor_type == 'agent' else ''}{event.actor_id}"
    verb = _VERBS.get(event.type, f"reported a {event.type!r} event on")
    what = f"{who} {verb} {_resource(event.resource_type, event.resource_id, event.title)}"
    if kind == "mention":
        why = f" and mentioned you (@{handle})."
    elif kind == "reply":
        replied = _resource(event.reply_to_type or "", event.reply_to_id or "")
        why = f", replying to {replied}, which a run of yours created."
    else:
        why = f"; you subscribe to {event.resource_type} events."
    return f"{what}{why} The event is in the context; respond to it."


def event_context(event: ContentEventRecord) -> dict[str, Any]:
    """The event as the run's context (JSON), as the host reported it."""
    reply_to = None
    if event.reply_to_type is not None:
        reply_to = {"type": event.reply_to_type, "id": event.reply_to_id}
    return {
        "id": event.id,
        "type": event.type,
        "resource": {"type": event.resource_type, "id": event.resource_id, "title": event.title},
        "actor": {"type": event.actor_type, "id": event.actor_id, "run_id": event.actor_run_id},
        "text": event.text,
        "mentions": event.mentions,
        "reply_to": reply_to,
        "at": event.at.isoformat(),
        "hops": event.hops,
    }


class EventRouter:
    """Claims a content event once and starts the runs it asks for."""

    def __init__(self, store: Store, agents: AgentDirectory, runs: RunDispatcher) -> None:
        self._store = store
        self._agents = agents
        self._runs = runs

    async def receive(self, event: ContentEventRecord) -> Routing:
        """Store ``event`` (with its hops) and route it; a redelivery of its id routes
        nothing and answers with the first delivery's outcome."""
        events = self._store.content_events
        if event.actor_type == "agent":
            hops = await events.hops_of(event.org_id, event.actor_id, event.actor_run_id)
            event = replace(event, hops=hops)
        if not await events.claim(event):
            return await self._repeat(event.org_id, event.id)
        try:
            routing = await self._route(event)
        except BaseException:
            await events.release(event.org_id, event.id)  # its retry routes it afresh
            raise
        await events.settle(event.org_id, event.id, routing.outcome())
        return routing

    async def _repeat(self, org_id: str, event_id: str) -> Routing:
        """The first delivery's outcome (waiting ``REPEAT_WAIT_S`` for it when that
        delivery is still routing), else the runs it started so far."""
        events = self._store.content_events
        waited = 0.0
        while (outcome := await events.outcome(org_id, event_id)) is None:
            if waited >= REPEAT_WAIT_S:
                runs = await events.runs_of(org_id, event_id)
                started = [Started(r.agent, r.id, cast(TriggerKind, r.trigger)) for r in runs]
                return Routing(event_id=event_id, duplicate=True, runs=started)
            await asyncio.sleep(0.05)
            waited += 0.05
        return Routing(
            event_id=event_id,
            duplicate=True,
            runs=[Started(**item) for item in outcome["runs"]],
            skipped=[Skipped(**item) for item in outcome["skipped"]],
        )

    async def _route(self, event: ContentEventRecord) -> Routing:
        """Start (or skip, saying why) each agent the event concerns; handles that name
        no agent of the org are ignored."""
        agents = {agent.handle: agent for agent in await self._agents.list(event.org_id)}
        subs = await self._store.subscriptions.matching(
            event.org_id, resource_type=event.resource_type,
            resource_id=event.resource_id, event_type=event.type,
        )  # fmt: skip
        kinds = candidates(
            mentions=mentioned(event.text, event.mentions),
            repliers=await self._repliers(event),
            subscribers=[sub.agent for sub in subs],
        )
        routing = Routing(event_id=event.id)
        for handle, kind in kinds.items():
            agent = agents.get(handle)
            if agent is None:
                continue
            reason = await self._refusal(event, agent)
            if reason is None:
                reason = await self._start_cooled(event, agent, kind, routing)
            if reason is not None:
                routing.skipped.append(Skipped(handle, kind, reason))
                _log.info(
                    "trigger.skipped", agent=handle, kind=kind, reason=reason,
                    event_id=event.id, org_id=event.org_id,
                )  # fmt: skip
        return routing

    async def _repliers(self, event: ContentEventRecord) -> list[str]:
        """The agents whose runs created the resource the event replies to."""
        if event.reply_to_type is None or event.reply_to_id is None:
            return []
        found = await self._store.content_events.creators(
            event.org_id, event.reply_to_type, event.reply_to_id
        )
        return sorted(found)

    @staticmethod
    async def _refusal(event: ContentEventRecord, agent: Agent) -> SkipReason | None:
        """Why the event may not start ``agent`` (its own event, its hop limit), or
        ``None``."""
        if event.actor_type == "agent" and event.actor_id == agent.handle:
            return "self"
        if event.hops + 1 > agent.profile.triggers.max_hops:
            return "hops"
        return None

    async def _start_cooled(
        self, event: ContentEventRecord, agent: Agent, kind: TriggerKind, routing: Routing
    ) -> SkipReason | None:
        """Take the agent's cool-down on the resource (``cooldown`` when another event
        holds it), then start the run; a run that does not start gives it back."""
        seconds = agent.profile.triggers.cooldown_s
        if seconds <= 0:
            return await self._start(event, agent, kind, routing)
        cooldown = Cooldown(
            event.org_id, agent.handle, event.resource_type, event.resource_id, event.id
        )
        events, started = self._store.content_events, len(routing.runs)
        if not await events.take_cooldown(cooldown, seconds):
            return "cooldown"
        try:
            reason = await self._start(event, agent, kind, routing)
        except BaseException:
            await events.give_back_cooldown(cooldown)
            raise
        if len(routing.runs) == started:
            await events.give_back_cooldown(cooldown)
        return reason

    async def _start(
        self, event: ContentEventRecord, agent: Agent, kind: TriggerKind, routing: Routing
    ) -> SkipReason | None:
        """Queue the run (added to ``routing``); why not when the agent's pause or rate
        limit refuses it."""
        user_id, role = agent.acting_user("event")  # a person's agent acts as its parent
        request = RunRequest(
            org_id=event.org_id, user_id=user_id, role=role, agent=agent.handle,
            task=trigger_task(event, agent.handle, kind), context=event_context(event),
            idempotency_key=run_key(event.id), trigger=kind, trigger_event_id=event.id,
            hops=event.hops + 1,
        )  # fmt: skip
        try:
            run, _ = await self._runs.submit(request)
        except AgentNotFoundError:  # deleted meanwhile: nothing to start, nothing to say
            return None
        except AgentPausedError:
            return "paused"
        except AgentRateLimitedError:
            return "rate_limited"
        routing.runs.append(Started(agent.handle, run.id, kind))
        _log.info(
            "trigger.started", agent=agent.handle, kind=kind, run_id=run.id,
            event_id=event.id, org_id=event.org_id, hops=event.hops + 1,
        )  # fmt: skip
        return None
