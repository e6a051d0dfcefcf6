"""Property tests (hypothesis) of the human-in-the-loop and capability guarantees.

For any generated sequence of model tool calls and user actions, played against the real
``ToolRunner`` and the real executor loop (``run_step`` with a scripted model) over the demo
toolset on a real, seeded SQLite database:

1. a tool that needs confirmation runs only inside ``run(approved=True)`` of that exact
   tool_use_id, turn, tool and input (the input first recorded, i.e. what the user was
   shown), in a later run of that exact call once the user's approval is recorded on its
   row (the confirm route), or as the inverse of the user's own undo;
2. no tool outside the profile's capabilities, or the caller's role, ever runs (undo too);
3. a rejected call never runs, even if it is approved later;
4. a user picker never runs: its row only ever becomes ``succeeded`` with the user's pick;
5. the executor never approves, runs only its step's tools, and runs nothing of a message
   that has a call needing the user.

"Ran" is observed, never taken from return values: every handler is wrapped to record its
invocations, and the database must agree with them: each settled ``tool_executions`` row,
each ``audit_log`` row and each change to the demo tables traces back to an invocation.

Each example copies a migrated, seeded template database (built once per module), so the
examples are independent and the test stays fast. ``BOSUN_PROPERTY_EXAMPLES=N`` runs N
random examples instead of the fixed, derandomised 60 (for a longer bug hunt).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import tempfile
import uuid
from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import to_jsonable_python
from sqlalchemy import select

from bosun.migrate import upgrade
from bosun_demo import demo_registry, seed_demo
from bosun_demo import toolset as demo_toolset
from bosun_demo._tables import ClassSessionRow, MemberRow, ProgramRow, TaskRow, WorkoutRow
from context import TokenCounter
from events import Event
from executors import ExecutorKit, ExecutorLimits, TurnScope, run_step
from planner import PlannedStep
from providers import FunctionModel, ModelRequest, Reply, ToolCall
from store import Store, ToolExecutionRecord
from store._models import AuditLogRow
from tools import (
    Capabilities,
    ToolCallRequest,
    ToolContext,
    ToolDef,
    ToolError,
    ToolRegistry,
    ToolRunner,
    UserRole,
)

DEMO = demo_registry()
BY_ANY_NAME = {t.name: t for t in DEMO} | {t.wire_name: t for t in DEMO}
PICKER = "ui.ask_user_to_pick"
ORG = "acme"
SESSION_ID = "0e5e5e5e-0000-4000-8000-000000000001"
TURNS = ("turn_1", "turn_2")
# A small pool, so ids collide across calls, turns and undo ("tu_a-undo" is undo's id for tu_a).
TOOL_USE_IDS = ("tu_a", "tu_b", "tu_c", "tu_a-undo")
UNKNOWN_NAMES = (
    "members.serch",
    "tasks.purge",
    "Tasks.Delete",
    "tasks-delete",
    "tasks__delete",
    "tasks.delete ",
    "workouts",
    "class.sessions_cancel",  # the executor's dotted alias of class_sessions_cancel
    "programs_publish_bulk_all",
    "",
)
AUDITED_BY = {t.audit: t.name for t in DEMO if t.audit}
# Rejecting a call whose last approved run failed must stick (this test found the gap:
# reject() used to leave the row `failed`, so a later approval ran it again).
REJECTING_A_FAILED_CALL_STICKS = True


@cache
def _counter() -> TokenCounter:
    return TokenCounter()


# the generated scenario


@dataclass(frozen=True)
class Call:
    """A tool call as the model (or a replay) makes it; ``@kind:i`` strings in ``input``
    stand for the template's seeded ids until the call is played."""

    tool_use_id: str
    turn_id: str
    name: str
    input: dict[str, Any]


@dataclass(frozen=True)
class Run:
    """A direct runner call (a resumed turn replaying a model call), approved or not."""

    call: Call
    approved: bool


@dataclass(frozen=True)
class Decide:
    """The user acts on an earlier call (``ref`` modulo the calls seen so far): approve it,
    reject it, a replay without approval, or record an approval on its row as the confirm
    route does (a later replay without approval then runs it); ``tamper`` changes one input
    field first (an approval for one input must not run another), ``other_turn`` moves it
    to the other turn (where the same tool_use_id is a call of its own)."""

    ref: int
    verdict: Literal["approve", "reject", "resume", "record"]
    tamper: int | None
    other_turn: bool


@dataclass(frozen=True)
class Undo:
    ref: int


@dataclass(frozen=True)
class Pick:
    """The user answers a pending picker (if the call referred to is one)."""

    ref: int


@dataclass(frozen=True)
class Step:
    """One executor step: a scripted model emits ``messages`` of calls, in order."""

    turn_id: str
    tools: tuple[str, ...]
    messages: tuple[tuple[Call, ...], ...]
    max_tool_calls: int


Action = Run | Decide | Undo | Pick | Step


@dataclass(frozen=True)
class Scenario:
    role: UserRole
    capabilities: Capabilities
    actions: tuple[Action, ...]


def _ref(kind: str, count: int, missing: str) -> st.SearchStrategy[str]:
    return st.sampled_from([f"@{kind}:{i}" for i in range(count)] + [missing])


TITLES = st.sampled_from(["Tempo run", "Hill sprints", "Yoga"])
MEMBER = _ref("member", 8, "mem_missing")
PROGRAM = _ref("program", 3, "prg_missing")
WORKOUT = _ref("workout", 5, "wo_missing")
CLASS = _ref("class", 6, "cls_missing")
TASK = _ref("task", 4, "task_missing")


def _args(required: dict[str, Any], optional: dict[str, Any] | None = None) -> Any:
    return st.fixed_dictionaries(required, optional=optional or {})


VALID: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "members.search": _args(
        {"query": st.sampled_from(["sam", "sam rivera", "lee", "nobody"])},
        {"status": st.sampled_from(["active", "paused"]), "limit": st.integers(1, 25)},
    ),
    "members.get": _args({"member_id": MEMBER}),
    "programs.list": _args(
        {}, {"published": st.booleans(), "level": st.sampled_from(["beginner", "advanced"])}
    ),
    "programs.publish_bulk": _args(
        {"program_ids": st.lists(PROGRAM, min_size=1, max_size=3)},
        {"published": st.booleans()},
    ),
    "workouts.create": _args(
        {"title": TITLES},
        {"duration_min": st.integers(5, 300), "member_id": MEMBER, "program_id": PROGRAM},
    ),
    "workouts.update": _args(
        {"workout_id": WORKOUT},
        {"title": TITLES, "duration_min": st.integers(5, 300), "notes": st.just("moved")},
    ),
    "workouts.delete": _args({"workout_id": WORKOUT}),
    "class_sessions.schedule": _args(
        {
            "title": TITLES,
            "coach": st.just("Jo Park"),
            "starts_at": st.sampled_from(["2099-03-01T07:00:00+00:00", "2001-01-01T07:00:00Z"]),
        },
        {"capacity": st.integers(1, 100)},
    ),
    "class_sessions.cancel": _args({"session_id": CLASS}, {"reason": st.just("coach ill")}),
    "tasks.list": _args({}, {"done": st.booleans(), "limit": st.integers(1, 50)}),
    "tasks.create": _args({"title": TITLES}, {"due_on": st.just("2099-01-01")}),
    "tasks.complete": _args({"task_id": TASK}),
    "tasks.delete": _args({"task_id": TASK}),
    PICKER: _args(
        {
            "prompt": st.just("Which Sam?"),
            "candidates": st.lists(MEMBER, min_size=2, max_size=3, unique=True).map(
                lambda ids: [{"id": i, "label": f"Member {n}"} for n, i in enumerate(ids)]
            ),
        },
        {"kind": st.just("member")},
    ),
}
EXERCISE = {
    "exercise_name": "Push-up",
    "exercise_type": "reps",
    "sets": 3,
    "reps": [10, 10, 10],
    "rest_sec": 60,
    "muscles_utilized": [{"muscle": "Chest", "share": 1.0}],
    "goals_addressed": [{"goal": "strength", "share": 1.0}],
    "reasoning": "A staple.",
}
EXERCISE_REF = st.sampled_from(["1", "2", "ex_missing"])
NO_ARTIFACT = "art_" + "0" * 24
VALID |= {
    "trainer.generate_workout": _args(
        {"workout": st.just({"title": "Chest", "exercises": [EXERCISE, EXERCISE]})}
    ),
    "trainer.swap_exercise": _args(
        {"exercise_id": EXERCISE_REF, "new_exercise": st.just(EXERCISE)}
    ),
    "trainer.adjust_exercise": _args(
        {
            "exercise_id": EXERCISE_REF,
            "adjustments": st.sampled_from(
                [{"rest_sec": 90}, {"sets": 2, "reps": [5, 5]}, {"id": "x"}]
            ),
        }
    ),
    "trainer.remove_exercise": _args({"exercise_id": EXERCISE_REF}),
    "trainer.log_workout": _args({"completed_exercises": st.just([{"exercise_id": "1"}])}),
    "message.notify_user": _args({"message": st.just("Hi")}, {"artifact_id": st.just(NO_ARTIFACT)}),
    "artifacts.get": _args({"artifact_id": st.just(NO_ARTIFACT)}, {"version": st.integers(1, 3)}),
}
assert set(VALID) == set(DEMO.names()), "every demo tool needs an input strategy"

JSON_LEAF = (
    st.none()
    | st.booleans()
    | st.integers(-3, 400)
    | st.floats()
    | st.text(max_size=8)
    | MEMBER
    | WORKOUT
    | TASK
)
KEYS = st.sampled_from(["query", "task_id", "workout_id", "session_id", "program_ids", "x"])


def _garbage(tool: str) -> st.SearchStrategy[dict[str, Any]]:
    """Inputs that fail validation, or nearly: an invented field, a dropped one, noise."""
    valid = VALID[tool]
    return st.one_of(
        st.just({}),
        st.dictionaries(KEYS | st.text(max_size=6), JSON_LEAF | st.lists(JSON_LEAF), max_size=3),
        valid.map(lambda data: {**data, "colour": "teal"}),
        valid.map(lambda data: dict(list(data.items())[1:])),
        valid.map(lambda data: {k: [v] for k, v in data.items()}),
    )


# Tools that need the user come up twice as often: they are what the properties are about.
TOOL_POOL = tuple(
    name
    for t in DEMO
    for name in [t.name] * (2 if t.needs_confirmation or t.kind != "normal" else 1)
)
ASKING = tuple(t.name for t in DEMO if t.needs_confirmation or t.kind != "normal")


@st.composite
def calls(draw: st.DrawFn, turn_id: str | None = None, tools: tuple[str, ...] = ()) -> Call:
    """A call to a demo tool (half the time one that asks the user; mostly one of ``tools``,
    if given) by its wire name, registry name, or a name that is not a tool, with a valid
    input (mostly) or a broken one."""
    pool = tools if tools and draw(st.sampled_from([True, True, False])) else TOOL_POOL
    if not tools and draw(st.booleans()):
        pool = ASKING
    tool = DEMO.get(draw(st.sampled_from(pool)))
    form = draw(st.sampled_from(["wire", "name", "wire", "name", "wire", "unknown"]))
    name = {"name": tool.name, "wire": tool.wire_name}.get(form) or draw(
        st.sampled_from(UNKNOWN_NAMES) | st.text(max_size=12)
    )
    valid = draw(st.sampled_from([True, True, True, True, False]))
    data = draw(VALID[tool.name] if valid else _garbage(tool.name))
    turn = turn_id or draw(st.sampled_from([TURNS[0], TURNS[0], TURNS[1]]))
    return Call(draw(st.sampled_from(TOOL_USE_IDS)), turn, name, data)


@st.composite
def steps(draw: st.DrawFn) -> Step:
    """An executor step whose tools mostly include one that asks the user."""
    others = draw(st.lists(st.sampled_from(DEMO.names()), max_size=4, unique=True))
    asking = draw(st.sampled_from([*ASKING, None]))
    tools = tuple(dict.fromkeys([*([asking] if asking else []), *others])) or ("programs.list",)
    turn = draw(st.sampled_from(TURNS))
    message = st.lists(calls(turn, tools), min_size=1, max_size=3).map(tuple)
    messages = tuple(draw(st.lists(message, min_size=1, max_size=3)))
    return Step(turn, tools, messages, draw(st.integers(1, 6)))


# What the user does about a call just shown: "a" approve, "r" reject, "n" a replay without
# approval, "c" the confirm route's recorded approval; "*" on a tampered input (one field
# changed), "~" in the other turn.
SCRIPTS = (
    "", "a", "r", "n", "r a", "r a", "a*", "a*", "a~", "a~", "n a", "a a", "a r a", "r* a",
    "a* a", "r~ a", "a r", "n r a", "c n", "c n", "c n*", "c n~", "c r n", "r c n", "c c n",
)  # fmt: skip


@st.composite
def decisions(draw: st.DrawFn, refs: tuple[int, ...] = (-1,)) -> tuple[Decide, ...]:
    """The user's decisions on the call ``refs[i]`` back among those seen (``-1``: the last)."""
    ref = draw(st.sampled_from(refs))
    script = draw(st.sampled_from(SCRIPTS)).split()
    verdicts = {"a": "approve", "r": "reject", "n": "resume", "c": "record"}
    return tuple(
        Decide(
            ref,
            verdicts[word[0]],  # type: ignore[arg-type]
            draw(st.integers(0, 3)) if "*" in word else None,
            "~" in word,
        )
        for word in script
    )


# An episode: the model makes calls (a resumed turn replaying one, or an executor step),
# then the user decides on what was just shown; or the user acts on any earlier call.
REPLAYS = st.tuples(
    st.builds(Run, calls(), st.sampled_from([False, False, False, True])), decisions()
).map(lambda episode: (episode[0], *episode[1]))
STEPS = st.tuples(steps(), decisions((-1, -2, -3))).map(lambda ep: (ep[0], *ep[1]))
LATER = st.one_of(
    st.builds(Decide, st.integers(0, 20), st.sampled_from(["approve", "reject"]), st.none(),
              st.just(False)),
    st.builds(Undo, st.sampled_from([-1, -2]) | st.integers(0, 20)),
    st.builds(Pick, st.sampled_from([-1, -2]) | st.integers(0, 20)),
).map(lambda action: (action,))  # fmt: skip
EPISODES = st.one_of(REPLAYS, STEPS, REPLAYS, STEPS, LATER)

ENTRIES = [*DEMO.names(), *sorted({f"{t.router}.*" for t in DEMO}), "ghost.tool", "ghost.*"]
SCENARIOS = st.builds(
    Scenario,
    st.sampled_from(["staff", "owner", "staff", "member"]),
    st.builds(
        Capabilities,
        allow=st.sampled_from([None, None, None, "some"]).flatmap(
            lambda allow: (
                st.just(None)
                if allow is None
                else st.frozensets(st.sampled_from(ENTRIES), max_size=8)
            )
        ),
        blocked=st.just(frozenset()) | st.frozensets(st.sampled_from(ENTRIES), max_size=3),
    ),
    st.lists(EPISODES, min_size=2, max_size=5).map(lambda eps: tuple(a for ep in eps for a in ep)),
)


# the seeded template database


@dataclass(frozen=True)
class Template:
    path: Path
    ids: dict[str, list[str]]  # "workout" -> seeded workout ids, in a stable order
    tables: dict[str, dict[str, dict[str, Any]]]

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(f"Template({str(self.path)!r})")  # not its tables, in a failure report


TABLES: dict[str, tuple[Any, Any]] = {
    "member": (MemberRow, MemberRow.email),
    "program": (ProgramRow, ProgramRow.name),
    "workout": (WorkoutRow, WorkoutRow.title),
    "class": (ClassSessionRow, ClassSessionRow.starts_at),
    "task": (TaskRow, TaskRow.title),
}


async def _tables(store: Store) -> dict[str, dict[str, dict[str, Any]]]:
    """Every demo table's rows by id, in each table's natural order."""
    tables: dict[str, dict[str, dict[str, Any]]] = {}
    async with store.db.read() as conn:
        for kind, (table, order) in TABLES.items():
            rows = await conn.execute(select(table).order_by(order, table.id))
            tables[kind] = {row.id: row._asdict() for row in rows}
    return tables


async def _build_template(path: Path) -> Template:
    store = Store(f"sqlite+aiosqlite:///{path}")
    try:
        await upgrade(store, toolsets=[demo_toolset()])
        await seed_demo(store, ORG)
        await store.sessions.create(org_id=ORG, user_id="ada", session_id=SESSION_ID, title=None)
        tables = await _tables(store)
    finally:
        await store.close()
    return Template(path, {kind: list(rows) for kind, rows in tables.items()}, tables)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    path = tmp_path_factory.mktemp("approval-template") / "bosun.db"
    return asyncio.run(_build_template(path))


# playing a scenario


@dataclass(frozen=True)
class Invocation:
    """One call of a tool's handler, as the wrapped registry saw it."""

    tool: str
    tool_use_id: str | None
    args: dict[str, Any]
    role: UserRole
    phase: tuple[int, int | None]  # (action index, model message index within a step)


@dataclass(frozen=True)
class Played:
    """An action as it was actually played (references resolved)."""

    kind: Literal["run", "reject", "record", "undo", "pick", "step", "skip"]
    call: Call | None = None
    approved: bool = False
    before: str | None = None  # reject: the row's status just before
    original: str | None = None  # undo: the tool_use_id undone
    inverse: dict[str, Any] | None = None  # undo: the original's stored inverse just before
    pick: dict[str, Any] | None = None
    step: Step | None = None


@dataclass
class World:
    store: Store
    template: Template
    role: UserRole
    capabilities: Capabilities
    invocations: list[Invocation] = field(default_factory=list)
    log: list[Played] = field(default_factory=list)
    seen: list[Call] = field(default_factory=list)
    phase: tuple[int, int | None] = (-1, None)
    # per (step action, model message): the calls, the tools offered, the tool choice
    messages: dict[tuple[int, int], tuple[Call, ...]] = field(default_factory=dict)
    offered: dict[tuple[int, int], tuple[frozenset[str], str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.registry = ToolRegistry(self._recording(tool) for tool in DEMO)
        self.runner = ToolRunner(self.registry, self.store, capabilities=self.capabilities)
        self.ctx = ToolContext(store=self.store, org_id=ORG, user_id="ada", role=self.role)

    def _recording(self, tool: ToolDef) -> ToolDef:
        handler = tool.handler
        if handler is None:
            return tool  # a picker: nothing to run, nothing to wrap

        async def recorded(args: BaseModel, ctx: ToolContext) -> Any:
            self.invocations.append(
                Invocation(
                    tool=tool.name,
                    tool_use_id=ctx.tool_use_id,
                    args=args.model_dump(mode="json"),
                    role=ctx.role,
                    phase=self.phase,
                )
            )
            return await handler(args, ctx)

        return dataclasses.replace(tool, handler=recorded)

    def resolve(self, call: Call) -> Call:
        return dataclasses.replace(call, input=_resolve(call.input, self.template.ids))

    def request(self, call: Call) -> ToolCallRequest:
        return ToolCallRequest(
            tool_use_id=call.tool_use_id,
            name=call.name,
            input=call.input,
            session_id=SESSION_ID,
            turn_id=call.turn_id,
        )

    async def play(self, actions: tuple[Action, ...]) -> None:
        for index, action in enumerate(actions):
            self.phase = (index, None)
            self.log.append(await self._play(index, action))

    async def _play(self, index: int, action: Action) -> Played:
        match action:
            case Run(call=call, approved=approved):
                return await self._run(self.resolve(call), approved=approved, fresh=True)
            case Step():
                return await self._step(index, action)
        if not self.seen:
            return Played("skip")
        earlier = self.seen[action.ref % len(self.seen)]
        match action:
            case Decide(verdict="reject"):
                call = self._variant(earlier, action)
                row = await self.store.tool_executions.get(call.tool_use_id, turn_id=call.turn_id)
                await self.runner.reject(self.request(call))
                return Played("reject", call, before=row.status if row else None)
            case Decide(verdict="record"):  # by tool_use_id: it approves the row as shown
                won = await self.store.tool_executions.resolve(
                    earlier.tool_use_id,
                    turn_id=earlier.turn_id,
                    session_id=SESSION_ID,
                    status="approved",
                )
                event(f"record approval: {'won' if won else 'not pending'}")
                return Played("record", earlier, approved=won)
            case Decide(verdict=verdict):
                return await self._run(
                    self._variant(earlier, action), approved=verdict == "approve"
                )
            case Undo():
                row = await self.store.tool_executions.get(
                    earlier.tool_use_id, turn_id=earlier.turn_id
                )
                await self.runner.undo(earlier.tool_use_id, self.ctx, turn_id=earlier.turn_id)
                inverse = row.inverse if row else None
                return Played("undo", earlier, original=earlier.tool_use_id, inverse=inverse)
            case Pick():
                return await self._pick(earlier, action.ref)
        raise AssertionError(f"unplayed action {action!r}")

    def _variant(self, call: Call, decide: Decide) -> Call:
        if decide.tamper is not None:
            call = dataclasses.replace(
                call, input=_tampered(call.input, decide.tamper, self.template.ids)
            )
        if decide.other_turn:
            call = dataclasses.replace(call, turn_id=TURNS[1 - TURNS.index(call.turn_id)])
        return call

    async def _run(self, call: Call, *, approved: bool, fresh: bool = False) -> Played:
        if fresh:  # a call the model made (decisions on it are not new calls)
            self.seen.append(call)
        ran = len(self.invocations)
        outcome = await self.runner.run(self.request(call), self.ctx, approved=approved)
        code = outcome.needs or (outcome.error.code if outcome.error else "ok")
        event(f"run{' approved' if approved else ''}: {code}")
        if outcome.needs is not None:
            assert len(self.invocations) == ran, f"{call} asked the user and ran anyway"
        return Played("run", call, approved=approved)

    async def _pick(self, call: Call, ref: int) -> Played:
        row = await self.store.tool_executions.get(call.tool_use_id, turn_id=call.turn_id)
        if row is None or row.tool != PICKER or row.status != "pending":
            return Played("skip")
        candidates = row.input["candidates"]
        chosen = candidates[ref % len(candidates)]
        picked = {
            "id": chosen["id"],
            "label": chosen["label"],
            "kind": row.input.get("kind", "item"),
        }
        await self.store.tool_executions.resolve(
            row.tool_use_id,
            turn_id=row.turn_id,
            session_id=SESSION_ID,
            status="succeeded",
            output=picked,
        )
        return Played("pick", call, pick=picked)

    async def _step(self, index: int, step: Step) -> Played:
        messages = [tuple(self.resolve(c) for c in message) for message in step.messages]

        def reply(request: ModelRequest) -> Reply:
            k = sum(m.role == "assistant" for m in request.messages)
            self.phase = (index, k)
            self.offered[(index, k)] = (
                frozenset(spec.name for spec in request.tools),
                request.tool_choice,
            )
            if k >= len(messages):
                return Reply(text="Done.")
            self.messages[(index, k)] = messages[k]
            self.seen.extend(messages[k])
            return Reply(
                tool_calls=tuple(
                    ToolCall(id=c.tool_use_id, name=c.name, input=c.input) for c in messages[k]
                )
            )

        kit = ExecutorKit(
            model=FunctionModel(reply),
            runner=self.runner,
            registry=self.registry,
            counter=_counter(),
            limits=ExecutorLimits(wall_time_s=60.0),
        )
        planned = PlannedStep(
            id="s1", goal="Do what the user asked.", tools=list(step.tools),
            max_tool_calls=step.max_tool_calls,
        )  # fmt: skip
        scope = TurnScope(session_id=SESSION_ID, turn_id=step.turn_id, ctx=self.ctx)
        events: list[Event] = []
        outcome = await run_step(planned, kit=kit, scope=scope, emit=events.append)
        event(f"step: {type(outcome).__name__}")
        return Played("step", step=step)


def _resolve(value: Any, ids: dict[str, list[str]]) -> Any:
    """``@workout:2`` → the template's third workout id, anywhere in an input."""
    if isinstance(value, str) and value.startswith("@") and ":" in value:
        kind, _, index = value[1:].partition(":")
        return ids[kind][int(index)]
    if isinstance(value, dict):
        return {k: _resolve(v, ids) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, ids) for v in value]
    return value


def _tampered(data: dict[str, Any], seed: int, ids: dict[str, list[str]]) -> dict[str, Any]:
    """``data`` with one field changed (another seeded id of the same kind, if it is one)."""
    if not data:
        return {"x": seed}
    key = sorted(data)[seed % len(data)]
    value = data[key]
    pool = next((p for p in ids.values() if value in p), None) if isinstance(value, str) else None
    if pool is not None:
        changed: Any = pool[(pool.index(value) + 1 + seed % (len(pool) - 1)) % len(pool)]
    elif isinstance(value, bool):
        changed = not value
    elif isinstance(value, int | float):
        changed = value + 1
    elif isinstance(value, str):
        changed = value + "x"
    elif isinstance(value, list):
        changed = [*value, *value[:1]] if value else ["x"]
    else:
        changed = "x"
    return {**data, key: changed}


# the properties


def _undo_id(tool_use_id: str) -> str:
    """Documented: undo runs as a new execution ``{tool_use_id}-undo`` (ids here are short)."""
    return f"{tool_use_id}-undo"


def _same(call: Call, row: ToolExecutionRecord) -> bool:
    """Whether ``row`` records ``call``: its tool_use_id in its turn."""
    return (call.turn_id, call.tool_use_id) == (row.turn_id, row.tool_use_id)


def _permitted(caps: Capabilities, name: str) -> bool:
    """The profile rule as documented (written out here, not taken from the runner)."""
    router = f"{name.split('.', 1)[0]}.*"
    if name in caps.blocked or router in caps.blocked:
        return False
    return caps.allow is None or name in caps.allow or router in caps.allow


def _validated(tool: ToolDef, data: Any) -> dict[str, Any] | None:
    try:
        return tool.input_model.model_validate(data).model_dump(mode="json")
    except ValidationError:
        return None


class Checker:
    """Holds the played world against the database after the scenario."""

    def __init__(self, world: World, rows: list[ToolExecutionRecord]) -> None:
        self.world = world
        self.log = world.log
        self.invocations = world.invocations
        # A tool_use_id names a call only within its turn.
        self.rows = {(row.turn_id, row.tool_use_id): row for row in rows}

    def _turn(self, inv: Invocation) -> str:
        """The turn ``inv`` ran in: the step's, or that of the call played (undo: the
        original's, whose turn the undo is recorded in)."""
        played = self.log[inv.phase[0]]
        if played.step is not None:
            return played.step.turn_id
        assert played.call is not None, played
        return played.call.turn_id

    def invocation(self, inv: Invocation) -> None:
        world = self.world
        tool = DEMO.get(inv.tool)
        what = f"{inv.tool} {inv.tool_use_id} {inv.args} at action {inv.phase}"
        assert tool.kind != "user_picker", f"a picker ran: {what}"
        # 2. the profile and the role
        assert _permitted(world.capabilities, tool.name), f"outside the capabilities: {what}"
        assert inv.role == world.role and inv.role in tool.roles, f"role {inv.role}: {what}"
        # it is recorded, and ran on the recorded (shown) input
        row = self.rows.get((self._turn(inv), inv.tool_use_id or ""))
        assert row is not None and row.tool == tool.name, f"no execution row: {what} ({row})"
        # A run that failed may be declined afterwards: its row then ends rejected_by_user.
        settled = ("succeeded", "failed", "rejected_by_user")
        assert row.status in settled, f"ran but {row.status}: {what}"
        assert _validated(tool, row.input) == inv.args, f"ran on another input: {what} ({row})"
        # 1. what made it run
        played = self.log[inv.phase[0]]
        event(f"ran: {'confirmed' if tool.needs_confirmation else tool.category} ({played.kind})")
        if played.kind == "run":
            assert played.call is not None
            call = played.call
            assert call.tool_use_id == inv.tool_use_id and BY_ANY_NAME.get(call.name) is tool
            assert _validated(tool, call.input) == inv.args, f"{what} ran for {call}"
            assert (to_jsonable_python(call.input), call.turn_id) == (row.input, row.turn_id), (
                f"{what}: an approval bound to {call} ran the call recorded as {row}"
            )
            assert played.approved or not tool.needs_confirmation or self._recorded(inv), (
                f"ran unapproved: {what}"
            )
        elif played.kind == "undo":
            assert played.original is not None and played.inverse is not None, what
            assert inv.tool_use_id == _undo_id(played.original), what
            assert played.inverse["tool"] == tool.name, what
            assert _validated(tool, played.inverse["input"]) == inv.args, what
        elif played.kind == "step":
            assert played.step is not None and inv.phase[1] is not None
            # 5. the executor never approves, and runs only its step's tools
            assert not tool.needs_confirmation, f"the executor ran a confirmed tool: {what}"
            assert tool.name in played.step.tools, f"not a tool of the step: {what}"
            message = world.messages[(inv.phase[0], inv.phase[1])]
            assert any(c.tool_use_id == inv.tool_use_id for c in message), what
        else:
            raise AssertionError(f"{what} ran during a {played.kind} action")
        # 3. a rejected call never runs, even approved later
        for earlier in self.log[: inv.phase[0]]:
            if earlier.kind != "reject" or earlier.call is None:
                continue
            if (earlier.call.turn_id, earlier.call.tool_use_id) != (
                self._turn(inv),
                inv.tool_use_id,
            ):
                continue
            if earlier.before == "failed" and not REJECTING_A_FAILED_CALL_STICKS:
                continue
            raise AssertionError(f"{what} ran after the user rejected it ({earlier.call})")

    def _recorded(self, inv: Invocation) -> bool:
        """Whether an approval was recorded on ``inv``'s row before it ran (the row's input
        and turn are then what the run must match, which ``invocation`` checks)."""
        return any(
            p.kind == "record"
            and p.approved
            and p.call
            and (p.call.turn_id, p.call.tool_use_id) == (self._turn(inv), inv.tool_use_id)
            for p in self.log[: inv.phase[0]]
        )

    def row(self, row: ToolExecutionRecord) -> None:
        world = self.world
        what = f"row {row.tool_use_id} {row.tool} {row.status} {row.input}"
        rejects = [p for p in self.log if p.kind == "reject" and p.call is not None]
        if row.status == "rejected_by_user":
            assert any(_same(p.call, row) for p in rejects if p.call), what
        tool = DEMO.get(row.tool) if row.tool in DEMO else None
        if tool is None:  # only a rejection records a name that is not a tool
            assert row.status == "rejected_by_user", what
            return
        if tool.kind == "user_picker":  # 4. pending, rejected, or answered by the user
            picks = [p.pick for p in self.log if p.call and _same(p.call, row)]
            assert row.status != "failed", what
            assert row.status != "succeeded" or row.output in picks, what
            return
        if row.status not in ("succeeded", "failed"):
            return
        # settled: the handler ran, as the caller's role and within the profile
        assert any(
            (self._turn(inv), inv.tool_use_id, inv.tool)
            == (row.turn_id, row.tool_use_id, tool.name)
            for inv in self.invocations
        ), f"settled without its handler running: {what}"
        assert world.role in tool.roles and _permitted(world.capabilities, tool.name), what
        if tool.needs_confirmation:  # 1., from the database alone
            approved = any(
                p.kind == "run"
                and p.approved
                and p.call is not None
                and p.call.tool_use_id == row.tool_use_id
                and p.call.turn_id == row.turn_id
                and BY_ANY_NAME.get(p.call.name) is tool
                and to_jsonable_python(p.call.input) == row.input
                for p in self.log
            )
            undone = any(
                p.kind == "undo"
                and p.original is not None
                and p.call is not None
                and (p.call.turn_id, _undo_id(p.original)) == (row.turn_id, row.tool_use_id)
                for p in self.log
            )
            recorded = any(
                p.kind == "record" and p.approved and p.call and _same(p.call, row)
                for p in self.log
            )
            assert approved or undone or recorded, f"ran without a matching approval: {what}"

    def suspension(self, key: tuple[int, int], message: tuple[Call, ...]) -> None:
        """5. Nothing of a message runs when one of its calls needs the user."""
        offered, choice = self.world.offered[key]
        if choice == "none":  # a wrap-up turn: every call is refused anyway
            return
        needing = [c for c in message if self._needs_user(c, offered)]
        ran = [inv for inv in self.invocations if inv.phase == key]
        assert not (needing and ran), f"{ran} ran in a message that needs the user for {needing}"

    def _needs_user(self, call: Call, offered: frozenset[str]) -> bool:
        wire = call.name if call.name in offered else call.name.replace(".", "_")
        if wire not in offered:
            return False
        tool = BY_ANY_NAME[wire]
        admitted = (
            self.world.role in tool.roles
            and _permitted(self.world.capabilities, tool.name)
            and _validated(tool, call.input) is not None
        )
        return admitted and (tool.kind == "user_picker" or tool.needs_confirmation)

    def audit(self, rows: list[tuple[str, str | None]]) -> None:
        """Each audit row was written by an invocation of the tool that owns its label."""
        written = Counter((AUDITED_BY[action], tool_use_id) for action, tool_use_id in rows)
        ran = Counter((inv.tool, inv.tool_use_id) for inv in self.invocations)
        for key, count in written.items():
            assert count <= ran[key], f"{count} audit rows of {key} but {ran[key]} runs"

    def tables(
        self,
        before: dict[str, dict[str, dict[str, Any]]],
        after: dict[str, dict[str, dict[str, Any]]],
    ) -> None:
        """Every change to the demo tables was made by a handler that ran on that row."""

        def ran(tool: str, key: str) -> set[Any]:
            found: set[Any] = set()
            for inv in self.invocations:
                if inv.tool == tool:
                    value = inv.args[key]
                    found.update(value if isinstance(value, list) else [value])
            return found

        def count(tool: str) -> int:
            return sum(inv.tool == tool for inv in self.invocations)

        # kind: (deleted by, changed by (tool, id field), created by)
        effects = {
            "member": (None, None, None),
            "program": (None, ("programs.publish_bulk", "program_ids"), None),
            "workout": ("workouts.delete", ("workouts.update", "workout_id"), "workouts.create"),
            "class": (None, ("class_sessions.cancel", "session_id"), "class_sessions.schedule"),
            "task": ("tasks.delete", ("tasks.complete", "task_id"), "tasks.create"),
        }
        id_field = {"workout": "workout_id", "task": "task_id"}
        for kind, (deleter, changer, creator) in effects.items():
            old, new = before[kind], after[kind]
            removed = set(old) - set(new)
            added = set(new) - set(old)
            changed = {i for i in set(old) & set(new) if old[i] != new[i]}
            allowed_removed = ran(deleter, id_field[kind]) if deleter else set()
            assert removed <= allowed_removed, f"{kind} rows {removed} vanished unasked"
            assert len(added) <= (count(creator) if creator else 0), f"{kind} rows {added} appeared"
            allowed_changed = ran(*changer) if changer else set()
            assert changed <= allowed_changed, f"{kind} rows {changed} changed unasked"


async def _audit(store: Store) -> list[tuple[str, str | None]]:
    async with store.db.read() as conn:
        rows = await conn.execute(
            select(AuditLogRow.action, AuditLogRow.tool_use_id).where(AuditLogRow.org_id == ORG)
        )
        return [(row.action, row.tool_use_id) for row in rows]


async def _play_and_check(template: Template, scenario: Scenario) -> None:
    with tempfile.TemporaryDirectory(prefix="bosun-approval-") as tmp:
        for file in template.path.parent.glob(f"{template.path.name}*"):
            shutil.copy(file, Path(tmp) / file.name)
        store = Store(f"sqlite+aiosqlite:///{Path(tmp) / template.path.name}")
        try:
            world = World(store, template, scenario.role, scenario.capabilities)
            await world.play(scenario.actions)
            rows = [r for turn in TURNS for r in await store.tool_executions.list_for_turn(turn)]
            checker = Checker(world, rows)
            for inv in world.invocations:
                checker.invocation(inv)
            for row in rows:
                checker.row(row)
            for key, message in world.messages.items():
                checker.suspension(key, message)
            checker.audit(await _audit(store))
            checker.tables(template.tables, await _tables(store))
        finally:
            await store.close()


_HUNT = os.environ.get("BOSUN_PROPERTY_EXAMPLES")
ANYTHING = Capabilities()


def _call(name: str, data: dict[str, Any], tool_use_id: str = "tu_a", turn: str = "turn_1") -> Call:
    return Call(tool_use_id, turn, name, data)


def _script(*actions: Action, role: UserRole = "staff", caps: Capabilities = ANYTHING) -> Scenario:
    return Scenario(role, caps, actions)


APPROVE, REJECT, RESUME, RECORD = (
    Decide(-1, v, None, False) for v in ("approve", "reject", "resume", "record")
)
DELETE_TASK = _call("tasks_delete", {"task_id": "@task:0"})
DELETE_WORKOUT = _call("workouts_delete", {"workout_id": "@workout:1"})
CANCEL_CLASS = _call("class_sessions.cancel", {"session_id": "@class:2", "reason": "ill"})
PICK_SAM = _call(
    "ui_ask_user_to_pick",
    {"prompt": "Which Sam?", "candidates": [{"id": "@member:0", "label": "A"},
                                            {"id": "@member:1", "label": "B"}]},
)  # fmt: skip


# The patterns that matter most run on every test run, whatever the generated examples are.
@example(scenario=_script(Run(DELETE_TASK, False), REJECT, APPROVE))
@example(scenario=_script(Run(DELETE_TASK, False), RECORD, RESUME))
@example(scenario=_script(Run(DELETE_TASK, False), RECORD, Decide(-1, "resume", 1, False)))
@example(scenario=_script(Run(DELETE_WORKOUT, False), RECORD, REJECT, RESUME))
@example(scenario=_script(Run(DELETE_TASK, False), Decide(-1, "reject", 1, False), APPROVE))
@example(scenario=_script(Run(DELETE_WORKOUT, False), Decide(-1, "approve", None, True)))
@example(scenario=_script(Run(CANCEL_CLASS, False), Decide(-1, "approve", 0, False), APPROVE))
@example(scenario=_script(Run(PICK_SAM, True), Pick(-1), APPROVE, REJECT))
@example(
    scenario=_script(
        Step("turn_1", ("members.search", "workouts.delete"), (
            (_call("members_search", {"query": "sam"}, "tu_b"), DELETE_WORKOUT),
        ), 4),
        Decide(-1, "approve", None, False), Decide(-2, "approve", None, False),
    )
)  # fmt: skip
@example(
    scenario=_script(
        Run(_call("workouts.create", {"title": "Oops"}), False), Undo(-1),
        caps=Capabilities(blocked=frozenset({"workouts.delete"})),
    )
)  # fmt: skip
@example(
    scenario=_script(
        Run(_call("workouts.create", {"title": "Oops"}), False), Undo(-1),
        Run(_call("workouts_delete", {"workout_id": "@workout:0"}, "tu_a-undo"), True),
        role="owner",
    )
)  # fmt: skip
@example(
    scenario=_script(
        Run(_call("tasks_delete", {"task_id": "task_missing"}), True), RESUME, REJECT, APPROVE
    )
)
@settings(
    max_examples=int(_HUNT or 60),
    deadline=None,
    derandomize=_HUNT is None,
    database=None,
)
@given(scenario=SCENARIOS)
def test_no_tool_runs_without_approval_or_outside_the_profile(
    template: Template, scenario: Scenario
) -> None:
    asyncio.run(_play_and_check(template, scenario))


# The regression the property test found, pinned on both databases.

FLAKY = ToolRegistry()
PURGES: Counter[str] = Counter()


class PurgeInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    what: str


@FLAKY.tool(
    name="edge.purge", summary="Deletes for good; busy the first time.", category="destructive"
)
async def purge(args: PurgeInput, ctx: ToolContext) -> None:
    PURGES[args.what] += 1
    if PURGES[args.what] == 1:
        raise ToolError("busy", "The studio system is busy", hint="Try again")


async def test_a_call_rejected_after_a_failed_run_never_runs(store: Store) -> None:
    PURGES.clear()
    session_id = str(uuid.uuid4())
    await store.sessions.create(org_id=ORG, user_id="ada", session_id=session_id, title=None)
    runner = ToolRunner(FLAKY, store)
    ctx = ToolContext(store=store, org_id=ORG, user_id="ada", role="owner")
    call = ToolCallRequest(
        tool_use_id="tu_1", name="edge.purge", input={"what": "everything"},
        session_id=session_id, turn_id="turn_1",
    )  # fmt: skip
    assert (await runner.run(call, ctx)).needs == "confirmation"
    failed = await runner.run(call, ctx, approved=True)  # the user said yes; it failed
    assert failed.error is not None and failed.error.code == "busy"
    assert (await runner.run(call, ctx)).needs == "confirmation"  # a resumed turn asks again

    declined = await runner.reject(call)  # ... and this time the user says no
    late = await runner.run(call, ctx, approved=True)  # a stale approval arrives after

    row = await store.tool_executions.get("tu_1", turn_id="turn_1")
    assert (PURGES["everything"], late.ok) == (1, False)  # today: 2, True (it ran)
    assert declined.error is not None and declined.error.code == "rejected_by_user"
    assert row is not None and row.status == "rejected_by_user"  # today: succeeded
