"""A chat request's client context and locale, validated and bounded at the edge.

``context`` says where the user is (``page``), what they look at (``entity``), a
``focus``, free ``notes`` and a ``locale``; BuildOS's ``context_type``, ``entity_id`` and
``project_focus`` are accepted too (inside ``context`` or at the body's top level) and
mapped onto it (docs/api.md). The locale comes from ``context.locale``, else the
``x-locale`` header, else the first ``Accept-Language`` tag by weight. A bound broken is
a 400 ``invalid_request`` naming the field (the OpenAPI states every one); no two fields
can contradict each other, as each pair has a documented precedence.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from context import ClientContext, Entity
from stream._bounds import TEXT_PATTERN
from stream._errors import ApiError

LOCALE_PATTERN = r"^[A-Za-z]{2,3}(-[A-Za-z0-9]{1,8}){0,4}$"
"""A BCP 47 language tag as clients send them: a 2-3 letter language, then up to four
subtags (``he``, ``pt-BR``, ``zh-Hant-TW``)."""
ENTITY_TYPE_PATTERN = r"^[A-Za-z][A-Za-z0-9_.-]{0,39}$"
ENTITY_ID_PATTERN = r"^[!-~]{1,200}$"
"""An entity id: 1-200 printable ASCII characters without spaces (UUIDs, slugs, keys)."""
MAX_PAGE_CHARS = 500
MAX_FOCUS_CHARS = 500
MAX_NOTES_CHARS = 2_000
MAX_FOCUS_KEYS = 8
_LOCALE = re.compile(LOCALE_PATTERN)


class EntityIn(BaseModel):
    """What the user looks at: its type (a source may be bound to it) and its id."""

    model_config = ConfigDict(extra="forbid")

    type: str = Field(pattern=ENTITY_TYPE_PATTERN, description="e.g. member, project.")
    id: str = Field(pattern=ENTITY_ID_PATTERN, description="The entity's id in the app.")


FocusValue = Annotated[str, Field(max_length=200, pattern=TEXT_PATTERN)] | int | float | bool | None
FocusKey = Annotated[str, Field(max_length=40, pattern=TEXT_PATTERN)]
ProjectFocus = (
    Annotated[str, Field(max_length=MAX_FOCUS_CHARS, pattern=TEXT_PATTERN)]
    | Annotated[dict[FocusKey, FocusValue], Field(max_length=MAX_FOCUS_KEYS)]
)
"""BuildOS's ``project_focus``: text, or an object of up to 8 short scalar fields."""


class ClientContextIn(BaseModel):
    """The client's context (docs/api.md "Client context"). Unknown keys are refused."""

    model_config = ConfigDict(extra="forbid")

    page: str | None = Field(
        default=None, max_length=MAX_PAGE_CHARS, pattern=TEXT_PATTERN,
        description="Where the user is: a route or view name, e.g. /members/42.",
    )  # fmt: skip
    entity: EntityIn | None = Field(default=None, description="What the user looks at.")
    focus: str | None = Field(
        default=None, max_length=MAX_FOCUS_CHARS, pattern=TEXT_PATTERN,
        description="What the user is focused on, in a few words.",
    )  # fmt: skip
    notes: str | None = Field(
        default=None, max_length=MAX_NOTES_CHARS, pattern=TEXT_PATTERN,
        description="Free notes from the client (e.g. the rows the user selected).",
    )  # fmt: skip
    locale: str | None = Field(
        default=None, pattern=LOCALE_PATTERN,
        description="The language to reply in (BCP 47), e.g. he, pt-BR; overrides headers.",
    )  # fmt: skip
    context_type: str | None = Field(
        default=None, pattern=ENTITY_TYPE_PATTERN,
        description="BuildOS: the page's kind (global, project, calendar); with entity_id, "
        "the entity's type.",
    )  # fmt: skip
    entity_id: str | None = Field(
        default=None, pattern=ENTITY_ID_PATTERN,
        description="BuildOS: the id of the entity of type context_type.",
    )  # fmt: skip
    project_focus: ProjectFocus | None = Field(
        default=None, description="BuildOS: the focus (text, or an object of a few fields)."
    )

    def to_client(self, locale: str | None) -> ClientContext:
        """The turn's client context, with the ``locale`` the request resolved to. Bosun's
        own fields take precedence over BuildOS's (``entity`` over ``entity_id``, ``page``
        over ``context_type``, ``focus`` over ``project_focus``); an ``entity_id`` without
        a ``context_type`` names a project, as in BuildOS."""
        entity = None
        if self.entity is not None:
            entity = Entity(type=self.entity.type, id=self.entity.id)
        elif self.entity_id is not None:
            entity = Entity(type=self.context_type or BUILDOS_ENTITY, id=self.entity_id)
        return ClientContext(
            page=self.page or self.context_type,
            entity=entity,
            focus=self.focus or _focus_text(self.project_focus),
            notes=self.notes,
            locale=locale,
        )


def _focus_text(focus: str | dict[str, Any] | None) -> str | None:
    """BuildOS's ``project_focus`` as a line of text: a string as it is, an object as
    ``key: value`` pairs (bounded by the validator)."""
    if focus is None or isinstance(focus, str):
        return focus or None
    pairs = "; ".join(f"{k}: {v}" for k, v in focus.items() if v is not None)
    return pairs or None


BUILDOS_ENTITY = "project"
"""The entity type of BuildOS's ``entity_id`` sent without a ``context_type``."""
BUILDOS_FIELDS = ("context_type", "entity_id", "project_focus")
"""BuildOS's client context fields, also accepted at a chat body's top level."""


def merged_context(context: ClientContextIn | None, top: dict[str, Any]) -> ClientContextIn | None:
    """``context`` with BuildOS's top-level fields (``top``, those set) moved in; a field
    ``context`` sets too keeps the value ``context`` gives it."""
    given = {k: v for k, v in top.items() if v is not None}
    if not given:
        return context
    inner = context.model_dump(exclude_none=True) if context is not None else {}
    return ClientContextIn.model_validate({**given, **inner})


def accept_language(header: str) -> str | None:
    """The first valid tag of an ``Accept-Language`` header by weight (ties: the order
    sent), or ``None``. A malformed entry is skipped, never refused: browsers send it
    on every request, and a reply in the default language is the safe fallback."""
    ranked: list[tuple[float, int, str]] = []
    for index, entry in enumerate(header.split(",")[:32]):
        tag, _, params = entry.strip().partition(";")
        weight = 1.0
        if params.strip().startswith("q="):
            try:
                weight = float(params.strip()[2:])
            except ValueError:
                continue
        if weight > 0 and _LOCALE.fullmatch(tag.strip()):
            ranked.append((-weight, index, tag.strip()))
    return min(ranked)[2] if ranked else None


def request_locale(
    context: ClientContextIn | None, x_locale: str | None, accept: str | None
) -> str | None:
    """The locale a chat request asks for: ``context.locale``, else ``x-locale`` (a 400 if
    it is not a language tag), else ``Accept-Language``."""
    if context is not None and context.locale is not None:
        return context.locale
    if x_locale is not None and x_locale.strip():
        tag = x_locale.strip()
        if not _LOCALE.fullmatch(tag):
            raise ApiError(
                400, "invalid_request",
                f"x-locale must be a language tag such as he or pt-BR, not {x_locale!r:.40}",
            )  # fmt: skip
        return tag
    return accept_language(accept) if accept else None
