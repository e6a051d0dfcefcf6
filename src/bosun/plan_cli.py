"""``bosun plan``: a planner-only dry run from the terminal, or an evaluation of a set.

No server and no database writes: it builds the planner model and the catalogue (the demo
toolset and its sources, when enabled) from the settings and calls the planner directly.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from bosun.settings import Settings
from bosun.wiring import build_kit, provider_config
from planner import DryRun, PlanOutcome, dry_run, make_plan
from planner._eval import (
    EvalCase,
    ignored_fields,
    load_cases,
    render_html,
    render_table,
    run_eval,
    unoffered_tools,
    write_json,
)
from providers import Message, Model, ModelError, ModelSpecError, model_from_spec
from store import Store


def run(args: argparse.Namespace, settings: Settings) -> int:
    if (args.message is None) == (args.eval is None):
        print("bosun plan: give a message, or --eval FILE.jsonl", file=sys.stderr)
        return 2
    spec = args.model or settings.models.for_role("planner")
    if spec is None:
        print(
            "bosun plan: no planner model; pass --model SPEC or set BOSUN_MODELS__PLANNER",
            file=sys.stderr,
        )
        return 2
    try:
        model = model_from_spec(spec, provider_config(settings))
        cases = load_cases(args.eval) if args.eval else []
    except (ModelSpecError, OSError, ValueError) as exc:
        print(f"bosun plan: {exc}", file=sys.stderr)
        return 2
    if ignored := ignored_fields(cases):
        print(f"note: {args.eval}: ignoring unknown fields {', '.join(ignored)}", file=sys.stderr)
    if args.eval:
        return asyncio.run(_evaluate(args, settings, model, cases))
    return asyncio.run(_dry_run(args, settings, model))


async def _dry_run(args: argparse.Namespace, settings: Settings, model: Model) -> int:
    store = Store(settings.database_url)  # the sources' fetchers hold it; nothing connects
    try:
        kit = build_kit(settings, store)
        answer_spec = settings.models.for_role("merger") or model.name
        result = await dry_run(
            model,
            args.message,
            kit.planning(args.role, model),
            budgets=kit.budgets,
            priced_for=(settings.models.for_role("executor") or answer_spec, answer_spec),
        )
    except ModelError as exc:
        print(f"bosun plan: the planner model failed ({exc.code}): {exc.message}", file=sys.stderr)
        return 1
    finally:
        await store.close()
    print(json.dumps(result.to_dict(), indent=2) if args.json else render_dry_run(result))
    return 0


def render_dry_run(result: DryRun) -> str:
    """The dry run for a terminal: the plan, its sources, budgets and cost."""
    outcome, plan = result.outcome, result.outcome.plan
    lines = [f"strategy   {plan.strategy}", f"reasoning  {plan.reasoning}"]
    if outcome.fallback:
        lines.append(f"fallback   {outcome.fallback}")
    elif outcome.repaired:
        lines.append(f"repaired   after: {'; '.join(outcome.problems)}")
    for step in plan.steps:
        after = f"  after {', '.join(step.depends_on)}" if step.depends_on else ""
        lines.append(
            f"step {step.id:<5} {step.goal}  [{', '.join(step.tools) or 'no tools'}]"
            f"  ≤{step.max_tool_calls} calls{after}"
        )
    for source in result.sources:
        params = f" {source['params']}" if source["params"] else ""
        lines.append(f"source     {source['name']}{params}: {source['action']}")
    estimate = result.estimate
    lines += [
        f"estimate   {estimate.model_calls} model calls, {estimate.input_tokens:,} in / "
        f"{estimate.output_tokens:,} out tokens, ≤ ${estimate.cost_usd_micros / 1e6:.4f}",
        f"planner    {outcome.usage.input_tokens:,} in / {outcome.usage.output_tokens:,} out "
        f"tokens, ${outcome.cost_usd_micros / 1e6:.4f}, {outcome.duration_ms} ms ({outcome.model})",
    ]
    return "\n".join(lines)


async def _evaluate(
    args: argparse.Namespace, settings: Settings, model: Model, cases: list[EvalCase]
) -> int:
    store = Store(settings.database_url)
    try:
        kit = build_kit(settings, store)
        planning = kit.planning(args.role, model)
        offered = planning.catalogue.tools
        if missing := unoffered_tools(cases, offered):
            print(
                f"warning: labelled tools the served catalogue lacks (their recall is 0 "
                f"whatever the planner does): {', '.join(missing)}",
                file=sys.stderr,
            )

        async def plan(case: EvalCase) -> PlanOutcome:
            history = [Message(role=t.role, parts=Message.user(t.text).parts) for t in case.history]
            # one case's outage is scored as a fallback, not fatal to the run
            return await make_plan(
                model, case.message, planning, history=history, on_error="fallback"
            )

        progress = _bar if sys.stderr.isatty() else _count
        report = await run_eval(
            cases, plan, concurrency=max(1, args.concurrency), progress=progress, offered=offered
        )
    finally:
        await store.close()
    print(write_json(report) if args.json else render_table(report))
    if args.out:
        args.out.write_text(render_html(report), encoding="utf-8")
        print(f"report written to {args.out}", file=sys.stderr)
    return 0


def _count(done: int, total: int) -> None:
    """Progress for a log (stderr is no terminal): one line at the end, no frames."""
    if done == total:
        print(f"planned {done}/{total} cases", file=sys.stderr, flush=True)


def _bar(done: int, total: int) -> None:
    """Progress for a terminal: one line redrawn in place."""
    width = 30
    filled = width * done // total
    bar = "#" * filled + "-" * (width - filled)
    end = "\n" if done == total else ""
    print(f"\r[{bar}] {done}/{total}", end=end, file=sys.stderr, flush=True)
