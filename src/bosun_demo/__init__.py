"""The demo toolset: a small fitness studio (members, programs, workouts, class sessions,
tasks) on Bosun's own database, so a first ``bosun serve --dev`` does something real.

It is a toolset like any team's own (``bosun.tools.Toolset``), installed as the entry
point ``demo`` of the ``bosun.toolsets`` group and loaded only when named (``--toolset
demo``, ``toolsets = ["demo"]``, or ``serve --dev`` with none configured); no core package
imports it (an import contract says so). Its tables (``_tables``) are its own: its
migration branch ``demo`` (``migrations/``) creates them only when it is loaded.

``toolset()`` builds it; ``demo_registry()`` declares the tools, ``demo_sources()`` its
context sources, ``seed_demo()`` gives an org its data.
"""

from bosun_demo._seed import restore_demo, seed_demo, seed_id
from bosun_demo._sources import member_profile, profile, recent_activity, schedule
from bosun_demo._toolset import demo_registry, toolset
from bosun_demo._wiring import demo_sources

__all__ = [
    "demo_registry",
    "demo_sources",
    "member_profile",
    "profile",
    "recent_activity",
    "restore_demo",
    "schedule",
    "seed_demo",
    "seed_id",
    "toolset",
]
