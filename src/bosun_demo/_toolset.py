"""The demo toolset: every demo tool in one registry, plus the user picker, the trainer's
tools and the artifact tools they deliver with (``message.notify_user``, ``artifacts.get``)."""

from __future__ import annotations

from pathlib import Path

from bosun.tools import Toolset
from bosun_demo import _calendar, _catalog, _trainer, _workouts
from bosun_demo._models import Picked, PickRequest
from bosun_demo._seed import restore_demo, seed_demo
from bosun_demo._wiring import demo_sources
from tools import GET_ARTIFACT, NOTIFY_USER, ToolDef, ToolRegistry

MIGRATIONS = Path(__file__).parent / "migrations"

ASK_USER_TO_PICK = ToolDef(
    name="ui.ask_user_to_pick",
    summary=(
        "Ask the user to choose when several records fit (e.g. two members named Sam); "
        "give 2-8 candidates with their ids."
    ),
    input_model=PickRequest,
    output_model=Picked,
    category="read",
    confirm="never",
    kind="user_picker",
)


def demo_registry() -> ToolRegistry:
    """A fresh registry of the fitness-studio tools (the declarations are shared and frozen)."""
    registry = ToolRegistry(
        [
            *_catalog.toolset, *_workouts.toolset, *_calendar.toolset, ASK_USER_TO_PICK,
            *_trainer.toolset, NOTIFY_USER, GET_ARTIFACT,
        ]
    )  # fmt: skip
    registry.validate()
    return registry


def toolset() -> Toolset:
    """The demo as a toolset (the ``demo`` entry point): a fresh registry on each load."""
    return Toolset(
        name="demo",
        tools=demo_registry(),
        sources=demo_sources,
        artifact_types=(_trainer.WORKOUT,),
        migrations=MIGRATIONS,
        seed=seed_demo,
        restore=restore_demo,
        description="a small fitness studio: members, programs, workouts, classes, tasks",
    )
