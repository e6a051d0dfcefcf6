"""What executing a plan would cost, estimated before anything runs (for dry runs).

The estimate assumes each step spends its whole tool-call budget, each executor call
fills the executor's input budget (plus the results gathered so far), and complex plans
end with one merge call. It is a ceiling for budgeting, not a forecast: the provider's
reported usage of the real run is the truth.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner._plan import Plan
from providers import TokenUsage, cost_usd_micros

EXECUTOR_OUTPUT_TOKENS = 200  # per executor model call: a tool call or a short answer
TOOL_RESULT_TOKENS = 200  # what each tool result adds to the next call's input
MERGE_OUTPUT_TOKENS = 500
STEP_SUMMARY_TOKENS = 150  # what each step result adds to the merge call's input


@dataclass(frozen=True, kw_only=True, slots=True)
class CostEstimate:
    model_calls: int
    input_tokens: int
    output_tokens: int
    cost_usd_micros: int


def estimate_execution(
    plan: Plan,
    *,
    executor_model: str,
    merger_model: str,
    executor_input_tokens: int,
    merger_input_tokens: int,
) -> CostEstimate:
    """Calls, tokens and cost of running ``plan`` (its planner call excluded)."""
    calls = input_tokens = output_tokens = 0
    executor = TokenUsage()
    if plan.strategy == "simple":
        calls, input_tokens, output_tokens = 1, executor_input_tokens, MERGE_OUTPUT_TOKENS
        executor = TokenUsage(input_tokens=input_tokens, output_tokens=output_tokens)
    for step in plan.steps:
        step_calls = step.max_tool_calls + 1  # each tool call, then the step's answer
        step_input = sum(executor_input_tokens + i * TOOL_RESULT_TOKENS for i in range(step_calls))
        calls += step_calls
        input_tokens += step_input
        output_tokens += step_calls * EXECUTOR_OUTPUT_TOKENS
        executor = executor + TokenUsage(
            input_tokens=step_input, output_tokens=step_calls * EXECUTOR_OUTPUT_TOKENS
        )
    cost = cost_usd_micros(executor_model, executor)
    if plan.strategy == "complex":
        merge = TokenUsage(
            input_tokens=merger_input_tokens + STEP_SUMMARY_TOKENS * len(plan.steps),
            output_tokens=MERGE_OUTPUT_TOKENS,
        )
        calls += 1
        input_tokens += merge.input_tokens
        output_tokens += merge.output_tokens
        cost += cost_usd_micros(merger_model, merge)
    return CostEstimate(
        model_calls=calls,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cost_usd_micros=cost,
    )
