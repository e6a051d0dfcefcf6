"""Toolsets: what a domain brings to a server, loaded by name from configuration.

A ``Toolset`` is one frozen value a package exports; the server finds it by
``module:attribute`` or by the name of an entry point in the ``bosun.toolsets`` group, so a
team puts its own tools in front of Bosun by installing a package and naming it, without
forking Bosun. Loading checks everything that would otherwise fail later, mid-turn: a name
that does not resolve, two toolsets declaring the same tool or source, two with one name.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path

from context import Source, SourceRegistry
from store import Store
from tools import ArtifactType, ToolRegistry, register_artifact_type

GROUP = "bosun.toolsets"
"""The entry-point group an installed package declares its toolsets in."""

_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}", re.ASCII)


@dataclass(frozen=True, kw_only=True, slots=True)
class Toolset:
    """Everything one domain brings, as one value a server loads by name.

    ``tools``: its tool registry (names ``router.action``, unique across the loaded
    toolsets). ``sources``: builds its context sources over the server's store (a source
    with ``user_data=True`` is a user-data provider an agent may declare).
    ``artifact_types``: the artifact types its tools make (registered on load).
    ``migrations``: a folder of alembic scripts for its own tables, on the alembic branch
    labelled ``name``; ``bosun migrate`` applies it. ``seed``: example data for one org
    (``bosun chat`` seeds its ``--org``). ``restore``: example data for one org, putting
    back the seeded rows it lost (``bosun serve --dev`` calls it, or else ``seed``, for
    ``dev-org`` at each start, so scripted demos that name seeded rows run again). A plain
    frozen value, so listing, checking and merging toolsets needs no plugin code to run.
    """

    name: str
    tools: ToolRegistry = field(default_factory=ToolRegistry)
    sources: Callable[[Store], Iterable[Source]] | None = None
    artifact_types: tuple[ArtifactType, ...] = ()
    migrations: Path | None = None
    seed: Callable[[Store, str], Awaitable[object]] | None = None
    restore: Callable[[Store, str], Awaitable[object]] | None = None
    description: str = ""

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise ValueError(
                f"Toolset name {self.name!r} must be 1-40 lowercase letters, digits or "
                "underscores, starting with a letter (it labels its migration branch)"
            )
        if self.migrations is not None and not self.migrations.is_dir():
            raise ValueError(f"Toolset {self.name!r}: migrations {self.migrations} is no folder")


class ToolsetError(Exception):
    """A configured toolset that cannot be loaded, or that clashes with another one:
    start-up stops with this message."""


def installed_toolsets() -> dict[str, str]:
    """The entry points of the ``bosun.toolsets`` group: name -> ``module:attribute``."""
    return {ep.name: ep.value for ep in entry_points(group=GROUP)}


def load_toolset(spec: str) -> Toolset:
    """The toolset ``spec`` names: ``module:attribute`` (dots allowed in the attribute),
    or the bare name of an installed entry point. The attribute is a ``Toolset`` or a
    callable taking no arguments that returns one (a factory, for a fresh registry)."""
    try:
        found = _resolve(spec)
        toolset = found() if callable(found) and not isinstance(found, Toolset) else found
    except ToolsetError:
        raise
    except Exception as exc:  # a plugin's import or factory can fail any way: name it
        raise ToolsetError(f"Toolset {spec!r} did not load: {type(exc).__name__}: {exc}") from exc
    if not isinstance(toolset, Toolset):
        raise ToolsetError(
            f"Toolset {spec!r} is a {type(toolset).__name__}, not a bosun.tools.Toolset "
            "(or a function taking no arguments that returns one)"
        )
    return toolset


def _resolve(spec: str) -> object:
    module_name, colon, attribute = spec.partition(":")
    if not colon:
        matches = entry_points(group=GROUP, name=spec)
        if not matches:
            installed = ", ".join(sorted(installed_toolsets())) or "none"
            raise ToolsetError(
                f"No toolset {spec!r}: no installed package declares it in the entry-point "
                f"group {GROUP!r} (installed: {installed}); give module:attribute, or "
                "install (or reinstall) the package that declares it"
            )
        return next(iter(matches)).load()
    if not module_name or not attribute:
        raise ToolsetError(f"Toolset {spec!r}: expected module:attribute or an installed name")
    found: object = importlib.import_module(module_name)
    for part in attribute.split("."):
        found = getattr(found, part)
    return found


def load_toolsets(specs: Sequence[str]) -> tuple[Toolset, ...]:
    """Load every named toolset once (in order), register their artifact types, and check
    that no two share a name, a tool or a context source."""
    loaded: dict[str, tuple[str, Toolset]] = {}
    for spec in dict.fromkeys(specs):
        toolset = load_toolset(spec)
        if toolset.name in loaded:
            raise ToolsetError(
                f"Toolsets {loaded[toolset.name][0]!r} and {spec!r} are both named "
                f"{toolset.name!r}: a toolset's name must be unique"
            )
        loaded[toolset.name] = (spec, toolset)
    toolsets = tuple(toolset for _, toolset in loaded.values())
    merge_tools(toolsets)  # collisions fail here, at start-up
    register_artifact_types(toolsets)
    return toolsets


def register_artifact_types(toolsets: Iterable[Toolset]) -> None:
    """Register the artifact types ``toolsets`` make; one name with two models fails."""
    for toolset in toolsets:
        for kind in toolset.artifact_types:
            try:
                register_artifact_type(kind.name, kind.model, schema_version=kind.schema_version)
            except ValueError as exc:  # another toolset registered the name with its model
                raise ToolsetError(f"Toolset {toolset.name!r}: {exc}") from None


def merge_tools(toolsets: Iterable[Toolset]) -> ToolRegistry | None:
    """One registry of every toolset's tools (``None``: no toolset, so no tools). A tool
    two toolsets both include (the same declaration, e.g. ``message.notify_user``) is
    offered once; two declarations of one name are a ``ToolsetError`` naming both."""
    owners: dict[str, str] = {}
    merged: ToolRegistry | None = None
    for toolset in toolsets:
        merged = merged if merged is not None else ToolRegistry()
        for tool in toolset.tools:
            clash = next((n for n in (tool.name, tool.wire_name) if n in merged), None)
            if clash is not None:  # by name, or by provider (wire) name
                existing = merged.get(clash)
                if existing is tool:
                    continue
                raise ToolsetError(
                    f"Tool {tool.name!r} of toolset {toolset.name!r} collides with tool "
                    f"{existing.name!r} of toolset {owners[existing.name]!r}: tool names "
                    "must be unique across toolsets (rename one's router)"
                )
            owners[tool.name] = toolset.name
            merged.register(tool)
    if merged is not None:
        merged.validate()
    return merged


def merge_sources(toolsets: Iterable[Toolset], store: Store) -> SourceRegistry:
    """Every toolset's context sources over ``store``; a name two declare fails, naming both."""
    owners: dict[str, str] = {}
    merged = SourceRegistry()
    for toolset in toolsets:
        for source in toolset.sources(store) if toolset.sources else ():
            if source.name in owners:
                raise ToolsetError(
                    f"Context source {source.name!r} is declared by toolset "
                    f"{owners[source.name]!r} and by toolset {toolset.name!r}"
                )
            owners[source.name] = toolset.name
            merged.register(source)
    return merged
