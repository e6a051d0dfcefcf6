"""Token counting, per-role budgets, context sources, compression and prompt layout.

What a turn calls, in order: ``history`` (the model's view of the log) and
``needs_compression``/``compress_history``; ``loads_needed`` then ``load_sources``;
``fit_text``/``fit_history``/``fit_tools`` per section of the role's ``RoleBudget``;
``layout_request`` (or ``executor_request`` in a tool loop); ``BudgetReport.build``.
See docs/context.md.
"""

from context._artifact_text import artifact_text
from context._budget import (
    EXECUTOR_BUDGET,
    MERGER_BUDGET,
    PLANNER_BUDGET,
    BudgetConfigError,
    Budgets,
    RoleBudget,
)
from context._client import (
    CLIENT,
    CLIENT_TOKENS,
    ClientContext,
    Entity,
    client_section,
    entity_loads,
    fit_client,
    language_name,
    reply_in,
)
from context._compress import compress_history, make_title, needs_compression
from context._conversation import (
    KEEP_LAST,
    History,
    HistoryEntry,
    HistoryFit,
    abandoned,
    answer_text,
    conversation,
    fit_history,
    history,
    render_message,
)
from context._fit import afit_section, fit_section, fit_text
from context._grow import fit_growing, fit_whole
from context._knowledge import (
    KNOWLEDGE,
    KNOWLEDGE_SOURCE_TOKENS,
    covers,
    fit_knowledge,
    knowledge_items,
    loads_from_log,
    loads_needed,
)
from context._layout import (
    PromptParts,
    caller_block,
    executor_request,
    layout_request,
    prefix_ratio,
)
from context._order import order_messages
from context._report import BudgetReport, SectionUsage
from context._sections import Cut, Item, SectionFill
from context._session_detail import (
    OUTPUT_CAP_CHARS,
    ArtifactRef,
    CallDetail,
    CallStatus,
    MessageDetail,
    StepDetail,
    session_messages,
)
from context._session_report import (
    Compression,
    SessionBudgetReport,
    SourceUsage,
    TurnBudget,
    UsageFigures,
    UsageSummary,
    read_session_budget,
)
from context._sources import (
    Source,
    SourceLoad,
    SourceRegistry,
    SourceRequest,
    SourceScope,
    UnknownSourceError,
    load_sources,
)
from context._tokens import EncodingIntegrityError, TokenCounter
from context._tools import fit_tools
from context._transcript import compact_messages, compact_text
from context._user_data import PROFILE_SECTION, UserData, user_data_tag

__all__ = [
    "CLIENT",
    "CLIENT_TOKENS",
    "EXECUTOR_BUDGET",
    "KEEP_LAST",
    "KNOWLEDGE",
    "KNOWLEDGE_SOURCE_TOKENS",
    "MERGER_BUDGET",
    "OUTPUT_CAP_CHARS",
    "PLANNER_BUDGET",
    "PROFILE_SECTION",
    "ArtifactRef",
    "BudgetConfigError",
    "BudgetReport",
    "Budgets",
    "CallDetail",
    "CallStatus",
    "ClientContext",
    "Compression",
    "Cut",
    "EncodingIntegrityError",
    "Entity",
    "History",
    "HistoryEntry",
    "HistoryFit",
    "Item",
    "MessageDetail",
    "PromptParts",
    "RoleBudget",
    "SectionFill",
    "SectionUsage",
    "SessionBudgetReport",
    "Source",
    "SourceLoad",
    "SourceRegistry",
    "SourceRequest",
    "SourceScope",
    "SourceUsage",
    "StepDetail",
    "TokenCounter",
    "TurnBudget",
    "UnknownSourceError",
    "UsageFigures",
    "UsageSummary",
    "UserData",
    "abandoned",
    "afit_section",
    "answer_text",
    "artifact_text",
    "caller_block",
    "client_section",
    "compact_messages",
    "compact_text",
    "compress_history",
    "conversation",
    "covers",
    "entity_loads",
    "executor_request",
    "fit_client",
    "fit_growing",
    "fit_history",
    "fit_knowledge",
    "fit_section",
    "fit_text",
    "fit_tools",
    "fit_whole",
    "history",
    "knowledge_items",
    "language_name",
    "layout_request",
    "load_sources",
    "loads_from_log",
    "loads_needed",
    "make_title",
    "needs_compression",
    "order_messages",
    "prefix_ratio",
    "read_session_budget",
    "render_message",
    "reply_in",
    "session_messages",
    "user_data_tag",
]
