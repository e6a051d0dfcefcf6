"""Rebuild the conversation from the session log (the log is the only source of truth).

``conversation`` is the client's transcript (user texts and final answers). ``history`` is
what a model is shown: the native transcript (``context._transcript``: tool calls with
their results, artifacts after them), starting from the latest ``history_summarised``
event, so a compressed session replays as [summary note] + the messages after it.
``fit_history`` then fits that into a role's conversation section, newest first, a call
and its result kept together, recording every cut.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from context._fit import fit_section, fit_text
from context._sections import Cut, Item, SectionFill
from context._tokens import TokenCounter
from context._transcript import TurnLog, answers, pair_units, without_orphans
from providers import Message, Part, TextPart, ToolCall, ToolResult
from store import StoredEvent

SUMMARY_EVENT = "history_summarised"
SUMMARY_NOTE = (
    "[Summary of the earlier conversation; the messages it covers are not shown]\n{summary}"
)
OMITTED_MESSAGES = "[… {count} earlier messages omitted to fit the context budget]"
KEEP_LAST = 6  # the newest messages a model always sees verbatim
_SHORT_CHARS = 200  # an abbreviated message keeps this much of its start


@dataclass(slots=True)
class _TurnText:
    user: str | None = None
    user_seq: int = 0
    answer: list[str] = field(default_factory=list)
    done_seq: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class HistoryEntry:
    """A replayed message and the log sequence number that completed it."""

    message: Message
    seq: int


@dataclass(frozen=True, kw_only=True, slots=True)
class History:
    """What a model is shown of a session: the latest summary, then the messages after it."""

    entries: tuple[HistoryEntry, ...]
    summary: str | None = None
    up_to_seq: int | None = None
    summarised: tuple[Message, ...] = ()  # the messages the summary stands for
    covered: tuple[int, int] | None = None  # (messages, tokens) its event says it covers

    @property
    def messages(self) -> list[Message]:
        note = [Message.user(SUMMARY_NOTE.format(summary=self.summary))] if self.summary else []
        return [*note, *(entry.message for entry in self.entries)]

    @property
    def since_summary(self) -> int:
        """Messages after the latest summary (all of them when there is none)."""
        return len(self.entries)

    def split_seq(self, keep_last: int = KEEP_LAST) -> int | None:
        """The ``up_to_seq`` for a summary of all but the last ``keep_last`` messages
        (``None`` when there is nothing older to summarise)."""
        if len(self.entries) <= keep_last:
            return None
        cut = len(self.entries) - keep_last - 1
        while cut >= 0 and answers(self.entries[cut].message, self.entries[cut + 1].message):
            cut -= 1  # never between a tool call and its result
        return self.entries[cut].seq if cut >= 0 else None


@dataclass(frozen=True, kw_only=True, slots=True)
class HistoryFit:
    """The messages to send, and the conversation section's fill (for the report)."""

    messages: tuple[Message, ...]
    fill: SectionFill


def abandoned(events: Iterable[StoredEvent]) -> set[int]:
    """The seqs of the ``text_delta``s a later ``message_reset`` abandoned (the turn's,
    of the same ``step_id``, from its ``from_seq`` on): a takeover writes that text again,
    so every reader of the log leaves them out."""
    streamed: dict[tuple[str | None, object], list[int]] = {}
    dropped: set[int] = set()
    for stored in events:
        if stored.type not in ("text_delta", "message_reset"):
            continue
        key = (stored.turn_id, stored.data.get("step_id"))
        seqs = streamed.setdefault(key, [])
        if stored.type == "text_delta":
            seqs.append(stored.seq)
            continue
        start = int(stored.data["from_seq"])
        dropped.update(seq for seq in seqs if seq >= start)
        streamed[key] = [seq for seq in seqs if seq < start]
    return dropped


def answer_text(events: Iterable[StoredEvent]) -> str:
    """A turn's answer as its log spells it: its ``text_delta``s without ``step_id``, less
    those a ``message_reset`` abandoned."""
    logged = list(events)
    gone = abandoned(logged)
    return "".join(
        e.data["delta"]
        for e in logged
        if e.type == "text_delta" and e.data.get("step_id") is None and e.seq not in gone
    )


def _entries(
    events: Iterable[StoredEvent], exclude_turn: str | None
) -> tuple[list[HistoryEntry], StoredEvent | None]:
    turns: dict[str, _TurnText] = {}
    summary: StoredEvent | None = None
    logged = list(events)
    gone = abandoned(logged)
    for stored in logged:
        data = stored.data
        if stored.type == SUMMARY_EVENT and {"summary", "up_to_seq"} <= data.keys():
            summary = stored  # events arrive in seq order: the last one is the latest
            continue
        if stored.turn_id is None or stored.turn_id == exclude_turn:
            continue
        turn = turns.setdefault(stored.turn_id, _TurnText())
        if stored.type == "user_message":
            turn.user, turn.user_seq = data["text"], stored.seq
        elif stored.type == "text_delta" and data.get("step_id") is None:
            if stored.seq not in gone:  # text a takeover wrote again is told once
                turn.answer.append(data["delta"])
        elif stored.type == "message_done":
            turn.done_seq = stored.seq
    entries: list[HistoryEntry] = []
    for turn in turns.values():
        if turn.user is not None:
            entries.append(HistoryEntry(message=Message.user(turn.user), seq=turn.user_seq))
        if turn.done_seq is not None:
            answer = Message.assistant("".join(turn.answer))
            entries.append(HistoryEntry(message=answer, seq=turn.done_seq))
    return entries, summary


def _native(
    events: Iterable[StoredEvent], exclude_turn: str | None
) -> tuple[list[HistoryEntry], StoredEvent | None]:
    """The session as native messages (``context._transcript``), turn after turn, and the
    latest summary event."""
    turns: dict[str, TurnLog] = {}
    summary: StoredEvent | None = None
    logged = list(events)
    gone = abandoned(logged)
    for stored in logged:
        if stored.type == SUMMARY_EVENT and {"summary", "up_to_seq"} <= stored.data.keys():
            summary = stored  # events arrive in seq order: the last one is the latest
            continue
        if stored.turn_id is None or stored.turn_id == exclude_turn or stored.seq in gone:
            continue
        turns.setdefault(stored.turn_id, TurnLog()).fold(stored)
    entries: list[HistoryEntry] = []
    for turn in turns.values():
        for message, seq in turn.messages():
            _append(entries, message, seq)
    return entries, summary


def _append(entries: list[HistoryEntry], message: Message, seq: int) -> None:
    """Append a message; a user message right after another (a turn that got no answer,
    a question after a tool result) is merged into it (spec §4.3: roles alternate)."""
    last = entries[-1] if entries else None
    if last is None or last.message.role != "user" or message.role != "user":
        entries.append(HistoryEntry(message=message, seq=seq))
        return
    texts = (*last.message.parts, *message.parts)
    if all(isinstance(p, TextPart) for p in texts):  # two texts read as one message
        merged = Message.user(f"{last.message.text}\n\n{message.text}")
    else:
        merged = Message(role="user", parts=texts)
    entries[-1] = HistoryEntry(message=merged, seq=max(seq, last.seq))


def conversation(
    events: Iterable[StoredEvent], *, exclude_turn: str | None = None
) -> list[Message]:
    """User messages and the final answers of finished turns, in turn order.

    Turns are keyed by ``turn_id`` because concurrent turns interleave in the log. An
    answer counts only once its ``message_done`` is logged: a reply cut off by an error is
    not replayed to the model as if it were whole. Summaries are ignored: this is the
    full transcript.
    """
    entries, _ = _entries(events, exclude_turn)
    return [entry.message for entry in entries]


def history(events: Iterable[StoredEvent], *, exclude_turn: str | None = None) -> History:
    """The model's view of a session as native messages (``context._transcript``): the
    latest summary (if any) and the messages after its ``up_to_seq``. Older summaries are
    superseded: each one folds in its predecessor. Consecutive user messages are merged
    into one (§4.3); tool results whose call the summary covers are left out.

    Reads only what it is given: the latest ``history_summarised`` event and the events
    after its ``up_to_seq`` are enough (a turn need not read the whole log)."""
    entries, summary = _native(events, exclude_turn)
    if summary is None:
        return History(entries=tuple(entries))
    up_to = int(summary.data["up_to_seq"])
    return History(
        entries=_without_orphans([e for e in entries if e.seq > up_to]),
        summary=str(summary.data["summary"]),
        up_to_seq=up_to,
        summarised=tuple(e.message for e in entries if e.seq <= up_to),
        covered=_covered(summary.data),
    )


def _without_orphans(entries: list[HistoryEntry]) -> tuple[HistoryEntry, ...]:
    if not entries:
        return ()
    kept = without_orphans([entries[0].message])
    head = [HistoryEntry(message=kept[0], seq=entries[0].seq)] if kept else []
    return (*head, *entries[1:])


def _covered(data: dict[str, object]) -> tuple[int, int] | None:
    messages, tokens = data.get("messages"), data.get("tokens")
    if isinstance(messages, int) and isinstance(tokens, int):
        return messages, tokens
    return None


def render_message(message: Message) -> str:
    """A message as ``role: text`` (tool calls and results inline): how it is counted."""
    pieces: list[str] = []
    for part in message.parts:
        match part:
            case TextPart(text=text):
                pieces.append(text)
            case ToolCall(name=name, input=data):
                pieces.append(f"[tool call {name} {data}]")
            case ToolResult(content=content):
                pieces.append(f"[tool result] {content}")
    return f"{message.role}: {' '.join(pieces)}"


def _shorten(message: Message) -> Message:
    """A message abbreviated in place: long texts and results cut to their head, every
    tool call and result kept with its id (so pairs stay valid)."""
    parts: list[Part] = []
    for part in message.parts:
        match part:
            case TextPart(text=text) if len(text) > _SHORT_CHARS + 40:
                parts.append(TextPart(text=f"{text[:_SHORT_CHARS].rstrip()} […]"))
            case ToolResult(content=content) if len(content) > _SHORT_CHARS + 40:
                short = f"{content[:_SHORT_CHARS].rstrip()} […]"
                parts.append(ToolResult(tool_use_id=part.tool_use_id, content=short,
                                        is_error=part.is_error))  # fmt: skip
            case _:
                parts.append(part)
    return Message(role=message.role, parts=tuple(parts))


def _render(messages: Sequence[Message]) -> str:
    return "\n".join(render_message(m) for m in messages)


def _unit_item(unit: Sequence[Message], index: int) -> Item:
    full = _render(unit)
    short = _render([_shorten(m) for m in unit])
    return Item(full=full, short=short if len(short) < len(full) else None, key=f"message {index}")


def _unit_messages(unit: Sequence[Message], text: str, form: str) -> list[Message]:
    if form == "full":
        return list(unit)  # the same objects: an unchanged prefix stays byte-identical
    if (
        form == "short"
        or len(unit) > 1
        or any(isinstance(p, ToolCall | ToolResult) for p in unit[0].parts)
    ):
        return [_shorten(m) for m in unit]  # tool work keeps its structure (and its ids)
    original = unit[0]
    prefix = f"{original.role}: "
    body = text[len(prefix) :] if text.startswith(prefix) else text
    return [Message(role=original.role, parts=(TextPart(text=body),))]


def fit_history(
    source: History | Sequence[Message],
    allocation: int,
    *,
    counter: TokenCounter,
    keep_last: int = KEEP_LAST,
    current: Message | None = None,
    section: str = "conversation",
) -> HistoryFit:
    """Fit a history (plus the ``current`` message, newest) into ``allocation`` tokens.

    A message with tool calls and the message with their results are one unit, kept,
    abbreviated or dropped together (a provider rejects a call without its result and a
    result without its call). The last ``keep_last`` units stay verbatim; older ones are
    abbreviated (ids kept), then dropped oldest first (a marker says how many); a single
    oversize message is cut. A history that starts from a summary keeps the summary first
    (it stands for everything older, so it is never the first thing dropped; it gets at
    most a third of the allocation) and records a ``compressed`` cut.
    """
    if isinstance(source, History) and source.summary is not None:
        return _fit_summarised(source, allocation, counter, keep_last, current, section)
    base = source.messages if isinstance(source, History) else list(source)
    messages = without_orphans([*base, current] if current is not None else base)
    units = [[messages[i] for i in unit] for unit in pair_units(messages)]
    fill = fit_section(
        section,
        allocation,
        [_unit_item(unit, i) for i, unit in enumerate(units)],
        counter=counter,
        drop_from="start",
        verbatim=keep_last,
        omitted=OMITTED_MESSAGES,
    )
    fitted = [
        message
        for i, text, form in zip(fill.kept, fill.items, fill.forms, strict=True)
        for message in _unit_messages(units[i], text, form)
    ]
    dropped = sum(len(units[i]) for i in range(len(units)) if i not in set(fill.kept))
    if dropped and fill.text:
        fitted.insert(0, Message.user(OMITTED_MESSAGES.format(count=dropped)))
    return HistoryFit(messages=tuple(without_orphans(fitted)), fill=fill)


def _fit_summarised(
    source: History,
    allocation: int,
    counter: TokenCounter,
    keep_last: int,
    current: Message | None,
    section: str,
) -> HistoryFit:
    note = fit_text(
        section, allocation // 3, SUMMARY_NOTE.format(summary=source.summary), counter=counter
    )
    rest = fit_history(
        [entry.message for entry in source.entries],
        allocation - note.used,
        counter=counter,
        keep_last=keep_last,
        current=current,
        section=section,
    )
    fill = SectionFill(
        name=section,
        allocated=allocation,
        used=note.used + rest.fill.used,
        text="\n\n".join(t for t in (note.text, rest.fill.text) if t),
        items=(*note.items, *rest.fill.items),
        kept=(*note.kept, *(i + 1 for i in rest.fill.kept)),
        forms=(*note.forms, *rest.fill.forms),
        cuts=(_compressed(source, counter, section), *note.cuts, *rest.fill.cuts),
    )
    messages = (Message.user(note.text), *rest.messages) if note.text else rest.messages
    return HistoryFit(messages=tuple(messages), fill=fill)


def _compressed(source: History, counter: TokenCounter, section: str) -> Cut:
    count = len(source.summarised)
    before = sum(counter.count(render_message(m)) for m in source.summarised)
    if source.covered is not None and not source.summarised:  # read from the anchor on
        count, before = source.covered
    after = counter.count(SUMMARY_NOTE.format(summary=source.summary))
    return Cut(
        section=section,
        action="compressed",
        tokens_before=before,
        tokens_after=after,
        detail=f"{count} messages up to seq {source.up_to_seq} summarised",
    )
