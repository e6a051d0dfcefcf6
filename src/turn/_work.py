"""The values a turn is decided by: where it starts, what it will do, what it answers.

``start_of`` decides once how a turn begins (``Fresh``: plan it; ``Direct``: no planner,
answer; ``Resumed``: go on from a suspension; ``TakenOver``: go on from a dead worker's
log), and the turn's phases then run as a small ``match`` over that value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from context import ClientContext, History
from events import ContextLoaded
from executors import PlanSuspended
from planner import Plan
from providers import Model
from store import StoredEvent
from turn._takeover import logged_plan


@dataclass(frozen=True, slots=True)
class Fresh:
    """A new turn with a planner: plan it, then load what the plan picked."""


@dataclass(frozen=True, slots=True)
class Direct:
    """No planner is configured: the answer is written directly."""


@dataclass(frozen=True, slots=True)
class Resumed:
    """The user answered a suspended turn: its plan goes on from ``paused`` (both read back
    from its ``turn_suspended`` event); its planning and loads are in the log already."""

    plan: Plan
    paused: PlanSuspended


@dataclass(frozen=True, slots=True)
class TakenOver:
    """Another worker ran this turn and died after planning it: go on from where its log
    (``events``, this turn's) ends."""

    plan: Plan
    events: Sequence[StoredEvent]


Start = Fresh | Direct | Resumed | TakenOver


def start_of(
    log: Sequence[StoredEvent],
    *,
    turn_id: str,
    resume: tuple[Plan, PlanSuspended] | None,
    takeover: bool,
    planner: Model | None,
) -> Start:
    """How the turn begins, decided once. A taken-over turn whose dead worker had not
    planned yet starts as a new one would."""
    if resume is not None:
        return Resumed(*resume)
    if takeover:
        mine = [e for e in log if e.turn_id == turn_id]
        plan = logged_plan(mine)
        if plan is not None:
            return TakenOver(plan, mine)
    return Fresh() if planner is not None else Direct()


@dataclass(frozen=True, kw_only=True, slots=True)
class Work:
    """What the turn does once it has started: run ``plan``'s steps (going on from
    ``paused``), or, with no steps to run, write the answer directly; ``loaded`` is the
    context this turn's planning fetched."""

    plan: Plan | None = None
    paused: PlanSuspended | None = None
    loaded: tuple[ContextLoaded, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class Ask:
    """What the turn answers: the user's ``text``, the conversation before it (``view``)
    and the session's ``knowledge`` (source name and text, oldest first), and the
    request's ``client`` context (where the user is, their locale)."""

    text: str
    view: History
    knowledge: Sequence[tuple[str, str]]
    client: ClientContext | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Crew:
    """Who does the work: the ``executor`` model runs steps, the ``merger`` writes."""

    executor: Model
    merger: Model
