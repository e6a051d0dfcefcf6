"""Evaluate the planner on a labelled set: strategy accuracy, tool choice, cost, latency.

Each line of the set is ``{"message": ..., "strategy": ..., "tools": [...]}`` with an
optional ``"history": [{"role": "user"|"assistant", "text": ...}]``. Other fields (an id,
a note) are kept aside and ignored, so a set can carry its own bookkeeping.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from planner._plan import Strategy
from planner._planner import PlanOutcome

STRATEGIES: tuple[Strategy, ...] = ("simple", "tool", "complex")


class _Turn(BaseModel):
    model_config = ConfigDict(extra="allow")  # unknown fields: ignored (``ignored_fields``)
    role: Literal["user", "assistant"]
    text: str


class EvalCase(BaseModel):
    model_config = ConfigDict(extra="allow")  # unknown fields: ignored (``ignored_fields``)
    message: str = Field(min_length=1)
    strategy: Strategy
    tools: list[str] = Field(default_factory=list)
    history: list[_Turn] = Field(default_factory=list)


def load_cases(path: Path) -> list[EvalCase]:
    """Cases from a JSONL file; a bad line fails with its line number."""
    cases = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            cases.append(EvalCase.model_validate_json(line))
        except ValueError as exc:
            raise ValueError(f"{path}:{number}: not a valid eval case: {exc}") from exc
    return cases


def ignored_fields(cases: Sequence[EvalCase]) -> list[str]:
    """The fields of ``cases`` the evaluation does not know (``history.*`` for a turn's),
    so a caller can say once that they were ignored."""
    names = {name for case in cases for name in case.model_extra or {}}
    names |= {f"history.{n}" for case in cases for t in case.history for n in t.model_extra or {}}
    return sorted(names)


@dataclass(frozen=True, slots=True)
class CaseResult:
    message: str
    expected: Strategy
    predicted: Strategy
    expected_tools: list[str]
    predicted_tools: list[str]
    fallback: str | None
    cost_usd_micros: int
    duration_ms: int


@dataclass(slots=True)
class EvalReport:
    cases: list[CaseResult]
    model: str
    confusion: dict[str, dict[str, int]] = field(default_factory=dict)
    unoffered_tools: list[str] = field(default_factory=list)
    """Labelled tools the served catalogue lacks: no plan could choose them."""

    @property
    def accuracy(self) -> float:
        return sum(c.expected == c.predicted for c in self.cases) / len(self.cases)

    def tool_scores(self) -> tuple[float | None, float | None]:
        """Micro-averaged precision and recall of the tools the plans chose; ``None`` when
        nothing was planned (precision) or labelled (recall): no score, not a perfect one."""
        true_pos = sum(len(set(c.expected_tools) & set(c.predicted_tools)) for c in self.cases)
        chosen = sum(len(set(c.predicted_tools)) for c in self.cases)
        wanted = sum(len(set(c.expected_tools)) for c in self.cases)
        return (true_pos / chosen if chosen else None, true_pos / wanted if wanted else None)

    def latency_ms(self, pct: float) -> int:
        ordered = sorted(c.duration_ms for c in self.cases)
        return ordered[max(0, math.ceil(pct / 100 * len(ordered)) - 1)]

    def summary(self) -> dict[str, Any]:
        precision, recall = self.tool_scores()
        return {
            "model": self.model,
            "cases": len(self.cases),
            "strategy_accuracy": round(self.accuracy, 4),
            "confusion": self.confusion,
            "tool_precision": None if precision is None else round(precision, 4),
            "tool_recall": None if recall is None else round(recall, 4),
            "unoffered_tools": self.unoffered_tools,
            "fallbacks": sum(c.fallback is not None for c in self.cases),
            "cost_usd_micros": sum(c.cost_usd_micros for c in self.cases),
            "latency_ms": {f"p{p}": self.latency_ms(p) for p in (50, 90, 99)},
        }

    def to_json(self) -> dict[str, Any]:
        return {**self.summary(), "results": [asdict(c) for c in self.cases]}


PlanFn = Callable[[EvalCase], Awaitable[PlanOutcome]]


async def run_eval(
    cases: Sequence[EvalCase],
    plan: PlanFn,
    *,
    concurrency: int = 4,
    progress: Callable[[int, int], None] | None = None,
    offered: Collection[str] | None = None,
) -> EvalReport:
    """Plan every case with at most ``concurrency`` in flight; report the metrics.
    ``offered``: the catalogue's tools, to report the labelled ones it lacks."""
    gate = asyncio.Semaphore(concurrency)
    done = 0

    async def one(case: EvalCase) -> tuple[CaseResult, str]:
        nonlocal done
        async with gate:
            outcome = await plan(case)
        done += 1
        if progress is not None:
            progress(done, len(cases))
        chosen = sorted({tool for step in outcome.plan.steps for tool in step.tools})
        return (
            CaseResult(
                message=case.message,
                expected=case.strategy,
                predicted=outcome.plan.strategy,
                expected_tools=sorted(set(case.tools)),
                predicted_tools=chosen,
                fallback=outcome.fallback,
                cost_usd_micros=outcome.cost_usd_micros,
                duration_ms=outcome.duration_ms,
            ),
            outcome.model,
        )

    pairs = await asyncio.gather(*(one(case) for case in cases))
    results = [result for result, _ in pairs]
    confusion: dict[str, dict[str, int]] = {e: dict.fromkeys(STRATEGIES, 0) for e in STRATEGIES}
    for result in results:
        confusion[result.expected][result.predicted] += 1
    model = pairs[0][1] if pairs else ""
    unoffered = unoffered_tools(cases, offered) if offered is not None else []
    return EvalReport(cases=results, model=model, confusion=confusion, unoffered_tools=unoffered)


def unoffered_tools(cases: Sequence[EvalCase], offered: Collection[str]) -> list[str]:
    """The tools ``cases`` label that ``offered`` lacks (a renamed tool, another toolset):
    their recall is 0 whatever the planner does."""
    return sorted({tool for case in cases for tool in case.tools} - set(offered))


def _percent(score: float | None, none: str) -> str:
    return none if score is None else f"{score:.1%}"


def _scores(summary: dict[str, Any]) -> tuple[str, str]:
    """Precision and recall as shown to people: a percentage, or why there is none."""
    return (
        _percent(summary["tool_precision"], "n/a (no tools planned)"),
        _percent(summary["tool_recall"], "n/a (no tools labelled)"),
    )


def render_table(report: EvalReport) -> str:
    """The metrics as a terminal table."""
    s = report.summary()
    precision, recall = _scores(s)
    lines = [
        f"planner eval: {s['cases']} cases, model {s['model']}",
        f"strategy accuracy  {s['strategy_accuracy']:.1%}",
        f"tool precision     {precision}   recall {recall}",
        f"fallback plans     {s['fallbacks']}",
        f"cost               ${s['cost_usd_micros'] / 1e6:.4f}",
        "latency ms         " + "  ".join(f"{k} {v}" for k, v in s["latency_ms"].items()),
    ]
    if report.unoffered_tools:
        lines.append(
            f"not offered        {', '.join(report.unoffered_tools)} (labelled, but the served "
            "catalogue lacks them: no plan could choose them)"
        )
    lines += [
        "",
        "confusion (rows: labelled, columns: planned)",
        f"{'':>10}" + "".join(f"{p:>9}" for p in STRATEGIES),
    ]
    lines += [
        f"{e:>10}" + "".join(f"{report.confusion[e][p]:>9}" for p in STRATEGIES) for e in STRATEGIES
    ]
    return "\n".join(lines)


def render_html(report: EvalReport) -> str:
    """A self-contained HTML page (no scripts, no network) for people."""
    from html import escape

    s = report.summary()
    precision, recall = _scores(s)
    unoffered = (
        f"<li>labelled tools the served catalogue lacks (no plan could choose them): "
        f"{escape(', '.join(report.unoffered_tools))}</li>"
        if report.unoffered_tools
        else ""
    )
    confusion = "".join(
        f"<tr><th>{e}</th>"
        + "".join(f"<td>{report.confusion[e][p]}</td>" for p in STRATEGIES)
        + "</tr>"
        for e in STRATEGIES
    )
    rows = "".join(
        f"<tr class={'ok' if c.expected == c.predicted else 'miss'}><td>{escape(c.message)}</td>"
        f"<td>{c.expected}</td><td>{c.predicted}</td>"
        f"<td>{escape(', '.join(c.expected_tools))}</td>"
        f"<td>{escape(', '.join(c.predicted_tools))}</td><td>{c.duration_ms}</td></tr>"
        for c in report.cases
    )
    head = "".join(f"<th>{p}</th>" for p in STRATEGIES)
    return f"""<!doctype html><meta charset=utf-8><title>Bosun planner eval</title>
<style>body{{font:14px system-ui;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px}}.miss{{background:#fde}}</style>
<h1>Planner eval</h1><p>{s["cases"]} cases, model {escape(s["model"])}</p>
<ul><li>strategy accuracy {s["strategy_accuracy"]:.1%}</li>
<li>tool precision {precision}, recall {recall}</li>{unoffered}
<li>fallback plans {s["fallbacks"]}</li><li>cost ${s["cost_usd_micros"] / 1e6:.4f}</li>
<li>latency p50 {s["latency_ms"]["p50"]} ms, p90 {s["latency_ms"]["p90"]} ms,
p99 {s["latency_ms"]["p99"]} ms</li></ul>
<h2>Confusion (rows: labelled, columns: planned)</h2>
<table><tr><th></th>{head}</tr>{confusion}</table>
<h2>Cases</h2><table><tr><th>message</th><th>labelled</th><th>planned</th>
<th>labelled tools</th><th>planned tools</th><th>ms</th></tr>{rows}</table>
"""


def write_json(report: EvalReport) -> str:
    return json.dumps(report.to_json(), indent=2)
