"""``bosun chat``: one turn in this process, no server, events printed as they are logged.

It proves the turn stands without HTTP (it is the same ``turn`` package the routes call)
and is handy: the session id, then the answer stream to stdout (``--json``: the events,
the first naming the session), the plan, steps and tool calls to stderr, and the session
stays in the database, so ``--session`` goes on with the conversation.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import uuid
from collections.abc import AsyncIterator

from bosun._dev_key import missing_key_help
from bosun.log import quiet_logging
from bosun.migrate import upgrade
from bosun.settings import Settings
from bosun.wiring import build_kit, build_models, configured_toolsets
from events import (
    ConfirmationPending,
    DisambiguationPending,
    Done,
    Error,
    Event,
    MessageDone,
    PlanCreated,
    StepCompleted,
    StepStarted,
    TextDelta,
    ToolCompleted,
    ToolStarted,
    TurnStatus,
    event_data,
    parse_event,
)
from providers import ModelSpecError
from store import SecretsKeyError, Store, StoredEvent, TurnInProgressError
from turn import ModelResolver, TurnHandle, TurnOrder, TurnRunner, new_session


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Exit status 0 when the turn completed or waits for the user, 1 when it did not.

    The server's info logs would drown the conversation: only warnings are logged, unless
    ``BOSUN_LOG_LEVEL`` asks for more."""
    quiet_logging(settings)
    try:
        status = asyncio.run(_chat(args, settings))
    except SecretsKeyError as exc:
        print(f"bosun chat: {missing_key_help(exc, 'chat')}", file=sys.stderr)
        return 2
    except (ModelSpecError, LookupError, TurnInProgressError) as exc:
        print(f"bosun chat: {exc}", file=sys.stderr)
        return 2
    return 0 if status in ("completed", "suspended") else 1


async def _chat(args: argparse.Namespace, settings: Settings) -> TurnStatus:
    secrets_key = settings.secrets_key.get_secret_value() if settings.secrets_key else None
    store = Store(settings.database_url, secrets_key=secrets_key)
    try:
        toolsets = configured_toolsets(settings)
        await upgrade(store, toolsets=toolsets)
        models = build_models(settings)
        kit = build_kit(settings, store, toolsets)
        for toolset in toolsets:  # example data for the org, as `serve --dev` gives dev-org
            if toolset.seed is not None:
                await toolset.seed(store, args.org)
        session_id = await _session(store, args)
        if not args.json:  # the id first, as every command's (a JSON stream's first event has it)
            print(session_id, flush=True)
        picked = await ModelResolver(models, store.org_keys).resolve(
            org_id=args.org, requested=None
        )
        runner = TurnRunner(
            store, turn_timeout_s=settings.limits.turn_timeout_s, kit=kit,
            lease_s=settings.workers.lease_s,
        )  # fmt: skip
        handle = await runner.start(
            TurnOrder(org_id=args.org, user_id=args.user, role=args.role),
            session_id=session_id, text=args.message, models=picked, trace_id=uuid.uuid4().hex,
        )  # fmt: skip
        async with heartbeat(store, runner, handle):
            status = await print_events(store, handle, as_json=args.json)
        await runner.wait(handle.turn_id)  # the title and summary upkeep end with it
        print(f"\nsession {session_id}: {status}", file=sys.stderr)
        return status
    finally:
        await store.close()


async def _session(store: Store, args: argparse.Namespace) -> str:
    """The session to talk in: ``--session`` (the caller's own), or a new one."""
    if args.session is None:
        return await new_session(
            store, org_id=args.org, user_id=args.user, first_message=args.message
        )
    record = await store.sessions.get(args.session)
    if record is None or (record.org_id, record.user_id) != (args.org, args.user):
        raise LookupError(f"no session {args.session!r} of user {args.user!r} in {args.org!r}")
    return record.id


@contextlib.asynccontextmanager
async def heartbeat(store: Store, runner: TurnRunner, handle: TurnHandle) -> AsyncIterator[None]:
    """Renew the turn's lease while it runs, as a server's keeper would (and nothing
    else: this process takes over no other worker's turns)."""

    async def beat() -> None:
        while True:
            await asyncio.sleep(runner.lease_s / 3)
            await store.leases.renew(runner.worker_id, [handle.turn_id], runner.lease_s)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def print_events(store: Store, handle: TurnHandle, *, as_json: bool) -> TurnStatus:
    """Follow the turn's log from its first event to its ``done``, printing each."""
    printer = _Printer(as_json=as_json)
    after = 0
    with store.log.notifier.listen(handle.session_id) as logged:
        while True:
            logged.clear()
            events = await store.log.read(handle.session_id, after=after, turn_id=handle.turn_id)
            for stored in events:
                after = stored.seq
                printer.print(stored)
                if stored.type == "done":
                    return stored.data["status"]  # type: ignore[no-any-return]
            await logged.wait()


class _Printer:
    """The answer to stdout as it streams, one line per other event worth seeing to
    stderr (or every event as a JSON line to stdout)."""

    def __init__(self, *, as_json: bool) -> None:
        self._as_json = as_json
        self._mid_line = False  # the answer's last piece did not end its line

    def print(self, stored: StoredEvent) -> None:
        if self._as_json:
            print(json.dumps({"seq": stored.seq, **stored.data}), flush=True)
            return
        event = parse_event(stored.data)
        if isinstance(event, TextDelta):
            if event.step_id is None:  # the answer; a step's own text stays in the log
                print(event.delta, end="", flush=True)
                self._mid_line = not event.delta.endswith("\n")
            return
        line = _line(event)
        if line:
            if self._mid_line:
                print(flush=True)
                self._mid_line = False
            print(f"· {line}", file=sys.stderr, flush=True)


WHOLE_ANSWER = frozenset({"end_turn", "stop_sequence", "tool_use"})
"""Stop reasons of an answer that ended on its own; any other cut it short (docs/api.md)."""

_SHOWN = (
    StepStarted, StepCompleted, ToolStarted, ToolCompleted, ConfirmationPending,
    DisambiguationPending, Error, Done,
)  # fmt: skip


def _line(event: Event) -> str:
    """One line for the terminal, or ``""`` for what it need not show."""
    if isinstance(event, PlanCreated):
        steps = "".join(f"\n    {s.id}: {s.goal}" for s in event.steps)
        return f"plan {event.strategy}{steps}"
    if isinstance(event, MessageDone) and event.stop_reason not in WHOLE_ANSWER:
        return f"answer cut short ({event.stop_reason})"
    if isinstance(event, _SHOWN):
        data = event_data(event)
        kind = data.pop("type")
        data.pop("summary", None)
        return f"{kind} {json.dumps(data)}"
    return ""
