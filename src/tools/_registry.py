"""Tool declarations and the registry the planner plans against and the executors run from.

A tool is data: a name, a model-visible summary, pydantic input/output models, and the
policies the runner enforces whatever the model asks (category, confirm, kind, roles,
inverse, audit). Declaring one is cheap; breaking a policy rule fails at import time.
"""

from __future__ import annotations

import copy
import difflib
import inspect
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, get_args, get_type_hints

from pydantic import BaseModel

from tools._schema import model_schema, signature

Category = Literal["read", "write", "destructive"]
Confirm = Literal["never", "destructive", "always"]
Kind = Literal["normal", "user_picker", "user_question"]
UserRole = Literal["owner", "staff", "member"]
Detail = Literal["name", "summary", "full"]

ALL_ROLES: frozenset[UserRole] = frozenset(get_args(UserRole))
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*$")

Handler = TypeVar("Handler", bound=Callable[..., Any])


@dataclass(frozen=True)
class Inverse:
    """How to undo a tool: the inverse tool's name and its input, built from this tool's
    validated input and its output (``workouts.create`` → ``workouts.delete`` of the id)."""

    tool: str
    build: Callable[[BaseModel, Any], dict[str, Any]]


def _check_choice(value: object, allowed: Any, what: str) -> None:
    choices = get_args(allowed)
    if value not in choices:
        raise ValueError(f"{what} must be one of {choices}, not {value!r}")


@dataclass(frozen=True, kw_only=True)
class ToolDef:
    """One declared tool. ``name`` is ``router.action``; ``handler`` is what the runner calls
    as ``handler(validated_input, ctx)`` (``None`` for user pickers: the user answers)."""

    name: str
    summary: str
    input_model: type[BaseModel]
    output_model: type[BaseModel] | None = None
    category: Category
    confirm: Confirm = "destructive"
    kind: Kind = "normal"
    inverse: Inverse | None = None
    roles: frozenset[UserRole] = ALL_ROLES
    audit: str | None = None
    handler: Callable[..., Any] | None = field(default=None, compare=False, repr=False)
    schema: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    """The input's JSON schema as the model sees it when it does not come from
    ``input_model`` (an MCP server's tool: ``input_model`` then checks against it)."""
    timeout_s: float | None = None
    """How long one call may run; ``None``: the runner's own limit (an MCP toolset sets
    its own, which its owner chose for that server)."""

    def __post_init__(self) -> None:
        if not NAME_PATTERN.match(self.name):
            raise ValueError(
                f"Tool name {self.name!r} must be router.action in lower snake case, "
                "e.g. 'members.search'"
            )
        if not self.summary.strip() or "\n" in self.summary:
            raise ValueError(f"Tool {self.name!r} needs a one-line summary for the model")
        _check_choice(self.category, Category, f"{self.name}: category")
        _check_choice(self.confirm, Confirm, f"{self.name}: confirm")
        _check_choice(self.kind, Kind, f"{self.name}: kind")
        for model in (self.input_model, self.output_model):
            if model is not None and not (isinstance(model, type) and issubclass(model, BaseModel)):
                raise TypeError(f"Tool {self.name!r}: {model!r} is not a pydantic model class")
        if not self.roles or not self.roles <= ALL_ROLES:
            raise ValueError(
                f"Tool {self.name!r}: roles must be a non-empty subset of {sorted(ALL_ROLES)}, "
                f"not {sorted(self.roles)}"
            )
        self._check_policies()

    def _check_policies(self) -> None:
        # A destructive tool that never asks would break the "humans approve destructive
        # actions" rule the runner relies on: make it impossible to declare.
        if self.category == "destructive" and self.confirm == "never":
            raise ValueError(
                f"Tool {self.name!r} is destructive, so it must be confirmed: use "
                "confirm='destructive' or 'always', or category='write'"
            )
        if self.kind != "normal" and (self.category != "read" or self.handler):
            picker = self.kind == "user_picker"
            what, answer = ("picker", "pick") if picker else ("question", "reply")
            raise ValueError(
                f"Tool {self.name!r} is a user {what}: it must be category='read' and take "
                f"no handler (the user's {answer} is its output)"
            )
        if self.category == "read" and (self.inverse or self.audit):
            raise ValueError(
                f"Tool {self.name!r} only reads: an inverse or an audit label applies to "
                "write and destructive tools"
            )

    @property
    def router(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def action(self) -> str:
        return self.name.split(".", 1)[1]

    @property
    def wire_name(self) -> str:
        """The name sent to providers, whose tool names may not contain dots."""
        return self.name.replace(".", "_")

    @property
    def needs_confirmation(self) -> bool:
        """Whether the runner must suspend for the user's approval before running it."""
        return self.confirm == "always" or (
            self.confirm == "destructive" and self.category == "destructive"
        )

    def input_schema(self) -> dict[str, Any]:
        """The model-facing JSON schema of the input (a copy of a cached schema)."""
        return copy.deepcopy(self._schema())

    def _schema(self) -> dict[str, Any]:
        return self.schema if self.schema is not None else model_schema(self.input_model)

    def output_schema(self) -> dict[str, Any] | None:
        if self.output_model is None:
            return None
        return copy.deepcopy(model_schema(self.output_model))

    def describe(self, detail: Detail = "summary") -> str:
        """One line for progressive disclosure: the name, ``name: summary``, or the full
        ``name(arg: type, opt?: type) [tags]: summary``."""
        if detail == "name":
            return self.name
        if detail == "summary":
            return f"{self.name}: {self.summary}"
        tags: list[str] = [] if self.category == "read" else [self.category]
        if self.needs_confirmation:
            tags.append("confirm")
        if self.kind != "normal":
            tags.append("asks the user")
        tag = f" [{', '.join(tags)}]" if tags else ""
        return f"{self.name}({signature(self._schema())}){tag}: {self.summary}"


def _models_of(handler: Callable[..., Any], name: str) -> tuple[type[BaseModel], Any]:
    """The input model (first parameter's annotation) and return annotation of a handler."""
    params = list(inspect.signature(handler).parameters)
    hints = get_type_hints(handler)
    input_model = hints.get(params[0]) if params else None
    if not (isinstance(input_model, type) and issubclass(input_model, BaseModel)):
        raise TypeError(
            f"Tool {name!r}: annotate the first parameter of {handler.__qualname__} with its "
            "pydantic input model"
        )
    if "return" not in hints:
        raise TypeError(
            f"Tool {name!r}: annotate the return type of {handler.__qualname__} "
            "(a pydantic model, or None)"
        )
    output = hints["return"]
    return input_model, None if output is type(None) else output


class UnknownToolError(KeyError):
    """Asked for a tool that is not registered (or not allowed to this role)."""

    code = "unknown_tool"

    def __str__(self) -> str:
        return str(self.args[0])


class ToolRegistry:
    """The declared tools, in registration order, by name and by provider (wire) name."""

    def __init__(self, tools: Iterable[ToolDef] = ()) -> None:
        self._tools: dict[str, ToolDef] = {}
        self._wire: dict[str, str] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: ToolDef) -> ToolDef:
        if tool.name in self._tools:
            raise ValueError(f"A tool named {tool.name!r} is already registered")
        if tool.wire_name in self._wire:
            raise ValueError(
                f"Tools {self._wire[tool.wire_name]!r} and {tool.name!r} share the provider "
                f"name {tool.wire_name!r}; rename one"
            )
        self._tools[tool.name] = tool
        self._wire[tool.wire_name] = tool.name
        return tool

    def tool(
        self,
        *,
        name: str,
        summary: str,
        category: Category,
        confirm: Confirm = "destructive",
        kind: Kind = "normal",
        inverse: Inverse | None = None,
        roles: frozenset[UserRole] = ALL_ROLES,
        audit: str | None = None,
    ) -> Callable[[Handler], Handler]:
        """Declare the decorated function as a tool's handler: its first parameter's
        annotation is the input model, its return annotation the output model."""

        def decorate(handler: Handler) -> Handler:
            input_model, output_model = _models_of(handler, name)
            self.register(
                ToolDef(
                    name=name,
                    summary=summary,
                    input_model=input_model,
                    output_model=output_model,
                    category=category,
                    confirm=confirm,
                    kind=kind,
                    inverse=inverse,
                    roles=roles,
                    audit=audit,
                    handler=handler,
                )
            )
            return handler

        return decorate

    def get(self, name: str) -> ToolDef:
        """The tool called ``name`` (``members.search``, or its wire name ``members_search``)."""
        tool = self._tools.get(name) or self._tools.get(self._wire.get(name, ""))
        if tool is None:
            close = difflib.get_close_matches(name, [*self._tools, *self._wire], n=6)
            names = list(dict.fromkeys(self._wire.get(c, c) for c in close))[:3]
            hint = f"; did you mean {', '.join(map(repr, names))}?" if names else ""
            raise UnknownToolError(f"No tool named {name!r}{hint}")
        return tool

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name in self._tools or name in self._wire)

    def __iter__(self) -> Iterator[ToolDef]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def names(self) -> list[str]:
        return list(self._tools)

    def by_category(self, *categories: Category) -> list[ToolDef]:
        return [tool for tool in self if tool.category in categories]

    def read_tools(self) -> list[ToolDef]:
        return self.by_category("read")

    def for_role(self, role: UserRole) -> ToolRegistry:
        """A registry of the tools ``role`` may use (what the planner may offer that user)."""
        return ToolRegistry(tool for tool in self if role in tool.roles)

    def validate(self) -> None:
        """Check what single declarations cannot: every inverse names a registered,
        runnable tool."""
        problems = []
        for tool in self:
            if tool.inverse is None:
                continue
            target = self._tools.get(tool.inverse.tool)
            if target is None:
                problems.append(f"{tool.name}: inverse {tool.inverse.tool!r} is not registered")
            elif target.kind == "user_picker" or target.category == "read":
                problems.append(f"{tool.name}: inverse {target.name!r} does not change anything")
        if problems:
            raise ValueError("Invalid tool registry: " + "; ".join(problems))
