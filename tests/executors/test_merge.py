"""The merge writes one answer from the step results, streamed without a step id, and
says what failed or was skipped."""

from __future__ import annotations

from context import History, HistoryEntry
from events import ContextBudget, Event, TextDelta
from executor_fakes import counter
from executors import MERGE_PROMPT, StepResult, Writer, merge
from planner import Plan, PlannedStep
from providers import FunctionModel, Message, ModelRequest, Reply, TokenUsage

PLAN = Plan(
    strategy="complex",
    reasoning="three jobs",
    steps=[
        PlannedStep(id="s1", goal="Look up the 7am class"),
        PlannedStep(id="s2", goal="Count active members"),
        PlannedStep(id="s3", goal="Cancel the class", depends_on=["s1"]),
    ],
)
RESULTS = [
    StepResult(step_id="s1", ok=False, ended="model_failed",
               summary="Incomplete: the model failed (provider_unavailable: down)."),
    StepResult(step_id="s2", ok=True, ended="answered", summary="120 active members."),
    StepResult(step_id="s3", ok=False, ended="skipped",
               summary="skipped: depends on s1, which failed"),
]  # fmt: skip


async def test_the_merge_reports_failures_and_streams_the_answer_without_a_step_id() -> None:
    def reply(request: ModelRequest) -> Reply:
        async def chunks():  # type: ignore[no-untyped-def]
            yield "You have 120 active members. "
            yield "I could not look up or cancel the 7am class: the lookup failed."
            yield TokenUsage(input_tokens=700, output_tokens=30)

        return chunks()  # type: ignore[return-value]

    model = FunctionModel(reply, name="merger-model")
    events: list[Event] = []
    history = History(entries=(
        HistoryEntry(message=Message.user("Hi, it's Ada from Acme."), seq=3),
        HistoryEntry(message=Message.assistant("Hi Ada, how can I help?"), seq=9),
    ))  # fmt: skip

    merged = await merge(PLAN, RESULTS, writer=Writer(model=model, counter=counter()),
                         user_text="Cancel the 7am and tell me how many members we have",
                         view=history, emit=events.append)  # fmt: skip

    request = model.calls[0]
    assert request.system[0].text == MERGE_PROMPT and request.tools == ()
    results = request.system[1].text
    assert '<step id="s1" status="failed" goal="Look up the 7am class">' in results
    assert '<step id="s2" status="ok" goal="Count active members">\n120 active members.' in results
    assert (
        '<step id="s3" status="skipped" goal="Cancel the class">\n'
        "skipped: depends on s1, which failed\n</step>"
    ) in results
    assert [m.text for m in request.messages] == [
        "Hi, it's Ada from Acme.",
        "Hi Ada, how can I help?",
        "Cancel the 7am and tell me how many members we have",
    ]
    assert [type(e) for e in events] == [ContextBudget, TextDelta, TextDelta]
    assert isinstance(events[0], ContextBudget) and events[0].role == "merger"
    assert all(e.step_id is None for e in events if isinstance(e, TextDelta))
    assert merged.text == (
        "You have 120 active members. "
        "I could not look up or cancel the 7am class: the lookup failed."
    )
    assert (merged.usage.input_tokens, merged.model, merged.stop_reason) == (
        700, "merger-model", "end_turn",
    )  # fmt: skip
    assert merged.budget.role == "merger" and merged.budget.within_budget


def test_the_documented_prompts_are_the_real_ones() -> None:
    from pathlib import Path

    from executors import EXECUTOR_PROMPT

    docs = (Path(__file__).resolve().parents[2] / "docs" / "executors.md").read_text()
    flat = " ".join(docs.split())
    assert " ".join(EXECUTOR_PROMPT.split()) in flat
    assert " ".join(MERGE_PROMPT.split()) in flat
