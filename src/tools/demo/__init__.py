"""The demo toolset: a small fitness studio (members, programs, workouts, class sessions,
tasks) on Bosun's own database, so ``bosun serve`` does something real out of the box.
Its tables (``_tables``) are the demo's own: the ``demo`` migration branch creates them
only when the demo is enabled.

``demo_registry()`` declares the tools, ``seed_demo()`` gives an org its data, and
``profile`` / ``schedule`` / ``recent_activity`` fetch the context the planner preloads.
"""

from tools.demo._seed import seed_demo, seed_id
from tools.demo._sources import member_profile, profile, recent_activity, schedule
from tools.demo._toolset import demo_registry

__all__ = [
    "demo_registry",
    "member_profile",
    "profile",
    "recent_activity",
    "schedule",
    "seed_demo",
    "seed_id",
]
