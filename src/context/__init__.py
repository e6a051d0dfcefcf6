"""Token counting, per-role budgets, context sources, compression and prompt layout.

What a turn calls, in order: ``history`` (the model's view of the log) and
``needs_compression``/``compress_history``; ``loads_needed`` then ``load_sources``;
``fit_text``/``fit_history``/``fit_tools`` per section of the role's ``RoleBudget``;
``layout_request`` (or ``executor_request`` in a tool loop); ``BudgetReport.build``.
See docs/context.md.
"""

from context._budget import (
    BUFFER,
    EXECUTOR_BUDGET,
    MERGER_BUDGET,
    PLANNER_BUDGET,
    ROLES,
    SUMMARISER_BUDGET,
    BudgetConfigError,
    Budgets,
    ModelRole,
    RoleBudget,
    SectionBudget,
)
from context._compress import (
    COMPRESS_AFTER_MESSAGES,
    compress_history,
    make_title,
    needs_compression,
)
from context._conversation import (
    KEEP_LAST,
    SUMMARY_EVENT,
    History,
    HistoryEntry,
    HistoryFit,
    conversation,
    fit_history,
    history,
    render_message,
)
from context._fit import afit_section, fit_section, fit_text
from context._knowledge import RANGE_PARAMS, covers, loads_from_log, loads_needed
from context._layout import (
    MAX_CACHE_MARKS,
    PromptParts,
    cache_marks,
    canonical_prompt,
    executor_request,
    layout_request,
    prefix_ratio,
)
from context._report import BudgetReport, SectionUsage
from context._sections import Cut, CutAction, Item, ItemForm, SectionFill
from context._session_report import (
    Compression,
    SessionBudgetReport,
    SourceUsage,
    TurnBudget,
    UsageFigures,
    UsageSummary,
    read_session_budget,
    session_budget_report,
)
from context._sources import (
    LoadedSources,
    Source,
    SourceLoad,
    SourceRegistry,
    SourceRequest,
    SourceResult,
    SourceScope,
    UnknownSourceError,
    load_sources,
)
from context._tokens import (
    CLAUDE_SAFETY_FACTOR,
    LARGE_TEXT_CHARS,
    OPEN_MODEL_SAFETY_FACTOR,
    EncodingIntegrityError,
    TokenCounter,
    encoding_for,
    load_encoding,
)
from context._tools import ToolsFit, fit_tools, tool_items

__all__ = [
    "BUFFER",
    "CLAUDE_SAFETY_FACTOR",
    "COMPRESS_AFTER_MESSAGES",
    "EXECUTOR_BUDGET",
    "KEEP_LAST",
    "LARGE_TEXT_CHARS",
    "MAX_CACHE_MARKS",
    "MERGER_BUDGET",
    "OPEN_MODEL_SAFETY_FACTOR",
    "PLANNER_BUDGET",
    "RANGE_PARAMS",
    "ROLES",
    "SUMMARISER_BUDGET",
    "SUMMARY_EVENT",
    "BudgetConfigError",
    "BudgetReport",
    "Budgets",
    "Compression",
    "Cut",
    "CutAction",
    "EncodingIntegrityError",
    "History",
    "HistoryEntry",
    "HistoryFit",
    "Item",
    "ItemForm",
    "LoadedSources",
    "ModelRole",
    "PromptParts",
    "RoleBudget",
    "SectionBudget",
    "SectionFill",
    "SectionUsage",
    "SessionBudgetReport",
    "Source",
    "SourceLoad",
    "SourceRegistry",
    "SourceRequest",
    "SourceResult",
    "SourceScope",
    "SourceUsage",
    "TokenCounter",
    "ToolsFit",
    "TurnBudget",
    "UnknownSourceError",
    "UsageFigures",
    "UsageSummary",
    "afit_section",
    "cache_marks",
    "canonical_prompt",
    "compress_history",
    "conversation",
    "covers",
    "encoding_for",
    "executor_request",
    "fit_history",
    "fit_section",
    "fit_text",
    "fit_tools",
    "history",
    "layout_request",
    "load_encoding",
    "load_sources",
    "loads_from_log",
    "loads_needed",
    "make_title",
    "needs_compression",
    "prefix_ratio",
    "read_session_budget",
    "render_message",
    "session_budget_report",
    "tool_items",
]
