"""``bosun budget SESSION``: a session's token-budget report as a table, JSON or HTML page.

The report itself comes from ``context.read_session_budget`` (the API serves the same
JSON); this module only renders it. The HTML page is self-contained: inline CSS and one
inline SVG bar chart per model call, no scripts, nothing fetched.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Iterable, Sequence
from html import escape
from pathlib import Path

from sqlalchemy.engine import make_url

from bosun.settings import Settings
from context import (
    BudgetReport,
    SessionBudgetReport,
    TurnBudget,
    UsageFigures,
    UsageSummary,
    read_session_budget,
)
from store import Store

BAR_CHARS = 10


def run_budget(args: argparse.Namespace, settings: Settings) -> int:
    """Read the report from ``settings.database_url`` and print (and write) it."""
    url = make_url(settings.database_url)
    if url.get_backend_name() == "sqlite" and not (url.database and Path(url.database).exists()):
        print(f"bosun budget: no SQLite database at {url.database!r}", file=sys.stderr)
        return 2
    report = asyncio.run(_read(settings.database_url, args.session))
    if report is None:
        print(f"bosun budget: no session {args.session!r} in the database", file=sys.stderr)
        return 1
    if args.html is not None:  # the page instead of the table: one line says where
        args.html.write_text(render_html(report), encoding="utf-8")
        print(f"wrote the budget report to {args.html}", file=sys.stderr)
    if args.json:
        print(render_json(report))
    elif args.html is None:
        print(render_table(report))
    return 0


async def _read(url: str, session_id: str) -> SessionBudgetReport | None:
    store = Store(url)
    try:
        if await store.sessions.get(session_id) is None:
            return None
        return await read_session_budget(store, session_id)
    finally:
        await store.close()


def render_json(report: SessionBudgetReport) -> str:
    return json.dumps(report.to_dict(), indent=2, ensure_ascii=False)


# --- terminal table -------------------------------------------------------------------


def _n(value: int) -> str:
    return f"{value:,}"


def _cost(micros: int) -> str:
    return f"${micros / 1e6:.6f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _share(used: int, allocated: int) -> float:
    return used / allocated if allocated else 0.0


def _grid(
    rows: Sequence[Sequence[str]], *, text_columns: Iterable[int] = (0,), indent: str = "  "
) -> list[str]:
    """Rows as aligned columns: ``text_columns`` left-aligned, numbers right-aligned."""
    text = set(text_columns)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        indent
        + "  ".join(
            cell.ljust(w) if i in text else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]


def _call_label(call: BudgetReport) -> str:
    return f"{call.role} {call.step_id}" if call.step_id else call.role


def _call_rows(call: BudgetReport) -> list[list[str]]:
    rows = []
    for i, s in enumerate(call.sections):
        share = _share(s.used, s.allocated)
        bar = "#" * round(min(share, 1.0) * BAR_CHARS)
        label = _call_label(call) if i == 0 else ""
        rows.append([label, s.name, _n(s.allocated), _n(s.used), f"{share:.0%}", bar])
    share = _share(call.total_used, call.total_allocated)
    rows.append(["", "total", _n(call.total_allocated), _n(call.total_used), f"{share:.0%}", ""])
    return rows


def _usage_rows(usage: UsageSummary) -> list[list[str]]:
    def row(name: str, u: UsageFigures) -> list[str]:
        return [
            name,
            _n(u.input_tokens),
            _n(u.output_tokens),
            _n(u.cache_read_tokens),
            _n(u.cache_write_tokens),
            _ratio(u.cache_hit_ratio),
            _cost(u.cost_usd_micros),
        ]

    header = ["usage", "input", "output", "cache read", "cache write", "cache hit", "cost"]
    return [header, *(row(r, u) for r, u in usage.by_role.items()), row("total", usage.total)]


def _turn_lines(number: int, turn: TurnBudget) -> list[str]:
    started = turn.started_at.strftime("%Y-%m-%d %H:%M:%S") if turn.started_at else "-"
    lines = [f"turn {number}  {turn.turn_id}  {turn.status}  {started}"]
    if turn.calls:
        header = ["call", "section", "allocated", "used", "use", ""]
        lines += _grid(
            [header, *(r for c in turn.calls for r in _call_rows(c))], text_columns=(0, 1, 5)
        )
    else:
        lines.append("  no model call reported a budget")
    lines += [
        f"  cut  {_call_label(c)}: {cut.section} {cut.action} "
        f"{_n(cut.tokens_before)} -> {_n(cut.tokens_after)}: {cut.detail}"
        for c in turn.calls
        for cut in c.cuts
    ]
    lines += _source_lines(turn)
    for c in turn.compressed:
        size = f"{_n(c.summary_tokens)} tokens" if c.summary_tokens is not None else "not used yet"
        lines.append(f"  compressed  messages up to seq {c.up_to_seq} (summary {size})")
    lines += _grid(_usage_rows(turn.usage))
    if turn.model_calls:
        lines += _grid(_model_call_rows(turn))
    lines += _cacheable_lines(turn)
    return lines


def _cacheable_lines(turn: TurnBudget) -> list[str]:
    """A note for each call whose prompt was below its model's minimum cacheable length:
    its cache marks did nothing, and no layout change will make them."""
    return [
        f"  note  model call {number} {call.role}: its prompt of "
        f"{_n(call.figures.prompt_tokens)} tokens is below {call.model}'s minimum "
        f"cacheable length of {_n(call.min_cacheable_tokens or 0)} tokens: never cached"
        for number, call in enumerate(turn.model_calls, 1)
        if call.below_min_cacheable
    ]


def _source_lines(turn: TurnBudget) -> list[str]:
    """Each loaded source (with its own budget, if it has one), then its own cuts."""
    lines = []
    for s in turn.sources:
        state = f"failed: {s.error}" if s.error else "truncated" if s.truncated else "whole"
        own = f" (own budget {_n(s.budget)})" if s.budget is not None else ""
        lines.append(f"  source  {s.source}: {_n(s.tokens)} tokens{own}, {state}")
        lines += [
            f"  cut  source {s.source}: {cut.action} "
            f"{_n(cut.tokens_before)} -> {_n(cut.tokens_after)}: {cut.detail}"
            for cut in s.cuts
        ]
    return lines


def _model_call_rows(turn: TurnBudget) -> list[list[str]]:
    """One row per model call, in order, with its own cache-hit ratio."""
    header = ["model call", "input", "output", "cache read", "cache write", "cache hit", "cost"]
    rows = [header]
    for number, call in enumerate(turn.model_calls, 1):
        u = call.figures
        rows.append([
            f"{number} {call.role}", _n(u.input_tokens), _n(u.output_tokens),
            _n(u.cache_read_tokens), _n(u.cache_write_tokens), _ratio(u.cache_hit_ratio),
            _cost(u.cost_usd_micros),
        ])  # fmt: skip
    return rows


def render_table(report: SessionBudgetReport) -> str:
    """The report for a terminal: per turn, a section table per call, cuts, usage."""
    totals = report.totals
    lines = [
        f"session {report.session_id}: {len(report.turns)} turn(s), "
        f"cost {_cost(totals.total.cost_usd_micros)}, "
        f"cache hit {_ratio(totals.total.cache_hit_ratio)}",
    ]
    for number, turn in enumerate(report.turns, 1):
        lines += ["", *_turn_lines(number, turn)]
    lines += ["", "session totals", *_grid(_usage_rows(totals))]
    return "\n".join(lines)


# --- HTML -----------------------------------------------------------------------------

_ROW_H, _BAR_H, _LABEL_W, _CHART_W, _VALUE_W = 24, 16, 120, 360, 130

_STYLE = """body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222;max-width:60em}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:2em;border-top:1px solid #ddd;
padding-top:1em}h3{font-size:1em;margin:1.2em 0 .3em}
table{border-collapse:collapse;margin:.4em 0}td,th{border:1px solid #ccc;padding:3px 8px}
td.n{text-align:right;font-variant-numeric:tabular-nums}
.alloc{fill:#dde3ea}.used{fill:#3b7dd8}.over{fill:#d8543b}
svg text{font:12px system-ui,sans-serif;fill:#222;dominant-baseline:middle}
.legend span{display:inline-block;width:1em;height:.8em;margin:0 .3em 0 1em}
.muted{color:#777}"""


def _chart(call: BudgetReport) -> str:
    """One horizontal bar per section: allocated (pale) with used drawn over it."""
    scale = max([s.allocated for s in call.sections] + [s.used for s in call.sections] + [1])
    height = _ROW_H * len(call.sections) + 4
    width = _LABEL_W + _CHART_W + _VALUE_W
    bars = []
    for i, s in enumerate(call.sections):
        y = 2 + i * _ROW_H
        top = y + (_ROW_H - _BAR_H) / 2
        alloc_w = _CHART_W * s.allocated / scale
        used_w = _CHART_W * s.used / scale
        used_class = "over" if s.used > s.allocated else "used"
        bars.append(
            f'<text x="0" y="{y + _ROW_H / 2}">{escape(s.name)}</text>'
            f'<rect class="alloc" x="{_LABEL_W}" y="{top}" width="{alloc_w:.1f}" '
            f'height="{_BAR_H}"><title>{escape(s.name)}: {_n(s.allocated)} allocated</title>'
            f"</rect>"
            f'<rect class="{used_class}" x="{_LABEL_W}" y="{top + 3}" width="{used_w:.1f}" '
            f'height="{_BAR_H - 6}"><title>{escape(s.name)}: {_n(s.used)} used</title></rect>'
            f'<text x="{_LABEL_W + _CHART_W + 8}" y="{y + _ROW_H / 2}">'
            f"{_n(s.used)} / {_n(s.allocated)}</text>"
        )
    label = escape(f"{_call_label(call)}: allocated vs used tokens per section")
    return (
        f'<svg class="chart" role="img" aria-label="{label}" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}">{"".join(bars)}</svg>'
    )


def _table(
    header: Iterable[str], rows: Iterable[Iterable[str]], *, text_columns: Iterable[int] = (0,)
) -> str:
    """An HTML table; cells outside ``text_columns`` are numbers, right-aligned."""
    text = set(text_columns)
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>"
        + "".join(
            f"<td>{escape(c)}</td>" if i in text else f'<td class="n">{escape(c)}</td>'
            for i, c in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _call_html(call: BudgetReport) -> str:
    title = escape(_call_label(call))
    total = f"{_n(call.total_used)} of {_n(call.total_allocated)} tokens used"
    cuts = ""
    if call.cuts:
        cuts = _table(
            ["section", "action", "before", "after", "detail"],
            (
                [c.section, c.action, _n(c.tokens_before), _n(c.tokens_after), c.detail]
                for c in call.cuts
            ),
            text_columns=(0, 1, 4),
        )
    heading = f'<h3>{title} <span class="muted">{total}</span></h3>'
    return f'<section class="call">{heading}{_chart(call)}{cuts}</section>'


def _turn_html(number: int, turn: TurnBudget) -> str:
    started = turn.started_at.strftime("%Y-%m-%d %H:%M:%S UTC") if turn.started_at else ""
    parts = [
        f"<h2>Turn {number} <span class=muted>{escape(turn.turn_id)} · "
        f"{escape(turn.status)} · {started}</span></h2>",
        *(_call_html(call) for call in turn.calls),
    ]
    if not turn.calls:
        parts.append("<p class=muted>No model call reported a budget.</p>")
    if turn.sources:
        parts.append("<h3>Sources</h3>")
        parts.append(
            _table(
                ["source", "tokens", "truncated", "error"],
                (
                    [s.source, _n(s.tokens), "yes" if s.truncated else "no", s.error or ""]
                    for s in turn.sources
                ),
                text_columns=(0, 2, 3),
            )
        )
    if turn.compressed:
        parts.append("<h3>Compressed history</h3>")
        parts.append(
            _table(
                ["up to seq", "summary tokens"],
                (
                    [str(c.up_to_seq), "" if c.summary_tokens is None else _n(c.summary_tokens)]
                    for c in turn.compressed
                ),
                text_columns=(),
            )
        )
    parts += ["<h3>Usage</h3>", _usage_html(turn.usage)]
    return "".join(parts)


def _usage_html(usage: UsageSummary) -> str:
    rows = _usage_rows(usage)
    return _table(rows[0], rows[1:])


def render_html(report: SessionBudgetReport) -> str:
    """A self-contained page: per turn and call a bar chart of allocated vs used."""
    totals = report.totals.total
    legend = (
        '<p class="legend"><span style="background:#dde3ea"></span>allocated'
        '<span style="background:#3b7dd8"></span>used</p>'
    )
    turns = "".join(_turn_html(n, t) for n, t in enumerate(report.turns, 1))
    return (
        "<!doctype html><html lang=en><meta charset=utf-8>"
        f"<title>Bosun token budget · {escape(report.session_id)}</title>"
        f"<style>{_STYLE}</style>"
        f"<h1>Token budget of session {escape(report.session_id)}</h1>"
        f"<p>{len(report.turns)} turn(s) · cost {_cost(totals.cost_usd_micros)} · "
        f"cache hit {_ratio(totals.cache_hit_ratio)}</p>{legend}{turns}"
        f"<h2>Session totals</h2>{_usage_html(report.totals)}</html>\n"
    )
