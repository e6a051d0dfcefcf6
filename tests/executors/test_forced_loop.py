"""The forced-tools loop (trainer spec §3): every model call must call a tool, the agent
talks through message_notify_user, asks with message_ask_user (the step suspends until
the user answers) and ends with agent_idle; a reply without a tool call, or an
iteration limit reached without idle, ends it with a clear error."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from bosun_demo import demo_registry
from context import EXECUTOR_BUDGET
from events import (
    Event,
    QuestionPending,
    TextDelta,
    ToolCompleted,
    event_data,
    parse_event,
)
from executor_fakes import FakeRunner, kit, per_goal, scope
from executors import (
    ExecutorKit,
    PendingCall,
    PlanResult,
    PlanSuspended,
    StepResult,
    Suspended,
    pending_events,
    restore,
    resume_step,
    run_plan,
    run_step,
    suspension_event,
)
from planner import Plan, PlannedStep
from providers import FunctionModel, ModelRequest, Reply, ToolCall, ToolResult
from tools import (
    ToolCallRequest,
    ToolContext,
    ToolDef,
    ToolOutcome,
    communication_tools,
)

GOAL = "Give me a quick chest workout"
LIST = ToolCall(id="t1", name="programs_list", input={})
NOTIFY = ToolCall(id="t2", name="message_notify_user", input={"message": "Here it is."})
IDLE = ToolCall(id="t3", name="agent_idle", input={"reason": "delivered"})
ASK = ToolCall(
    id="q1", name="message_ask_user", input={"question": "Dumbbells?", "options": ["yes", "no"]}
)


class TalkingRunner(FakeRunner):
    """A fake runner with the communication tools: a question waits until ``answers``
    has the user's reply for it (the real runner reads the call's row)."""

    def __init__(self) -> None:
        registry = demo_registry()
        for tool in communication_tools():
            if tool.name not in registry:
                registry.register(tool)
        super().__init__(
            {
                "programs.list": lambda _: {"programs": [{"id": "prg_1"}]},
                "message.notify_user": lambda i: {"success": True, "message": i["message"]},
                "agent.idle": lambda i: {"idle": True, "reason": i["reason"]},
            },
            registry,
        )
        self.answers: dict[str, str] = {}

    async def run(
        self, call: ToolCallRequest, ctx: ToolContext, *, approved: bool = False
    ) -> ToolOutcome:
        tool = self.check(call, ctx.role)
        if isinstance(tool, ToolDef) and tool.kind == "user_question":
            if call.tool_use_id not in self.answers:
                self.pending.append(call.tool_use_id)
                return ToolOutcome(
                    tool_use_id=call.tool_use_id, tool=tool.name, ok=False, needs="answer"
                )
            output = {"answer": self.answers[call.tool_use_id]}
            return ToolOutcome(tool_use_id=call.tool_use_id, tool=tool.name, ok=True, output=output)
        return await super().run(call, ctx, approved=approved)


def forced(model: FunctionModel, runner: FakeRunner, **limits: Any) -> ExecutorKit:
    roomy = EXECUTOR_BUDGET.with_tokens({"tools": 2_000})  # as fleet gives forced agents
    return replace(kit(model, runner, **limits), loop="forced_tools", budget=roomy)


def step(tools: list[str] | None = None) -> PlannedStep:
    return PlannedStep(id="s1", goal=GOAL, tools=tools or ["programs.list"], max_tool_calls=4)


def calls(*batches: tuple[ToolCall, ...]) -> list[Reply]:
    return [Reply(tool_calls=batch) for batch in batches]


async def test_a_tool_then_a_message_then_idle_completes_with_the_message_as_answer() -> None:
    model = per_goal({GOAL: calls((LIST,), (NOTIFY,), (IDLE,))})
    runner, events = TalkingRunner(), list[Event]()

    result = await run_step(
        step(), kit=forced(model, runner), scope=scope(), emit=events.append, final_answer=True
    )

    assert isinstance(result, StepResult)
    assert (result.ok, result.ended, result.summary) == (True, "idle", "Here it is.")
    assert [name for name, _ in runner.runs] == [
        "programs.list", "message.notify_user", "agent.idle",
    ]  # fmt: skip
    assert model.calls[0].tools[0].name == "message_notify_user"  # never cut: listed first
    assert [e for e in events if isinstance(e, TextDelta)] == [TextDelta(delta="Here it is.")]
    # Every request forces a tool, and offers the communication tools the plan never gave.
    assert [r.tool_choice for r in model.calls] == ["any", "any", "any"]
    offered = {t.name for t in model.calls[0].tools}
    assert offered == {"programs_list", "message_notify_user", "message_ask_user", "agent_idle"}
    assert "message_notify_user" in model.calls[0].system[-1].text


async def test_the_model_s_own_text_never_reaches_the_user() -> None:
    model = per_goal({GOAL: [Reply(text="thinking aloud", tool_calls=(NOTIFY,)), *calls((IDLE,))]})
    events: list[Event] = []

    await run_step(
        step(), kit=forced(model, TalkingRunner()), scope=scope(), emit=events.append,
        final_answer=True,
    )  # fmt: skip

    assert [e.delta for e in events if isinstance(e, TextDelta)] == ["Here it is."]


async def test_a_reply_without_a_tool_call_ends_the_loop_no_tool_call() -> None:
    model = per_goal({GOAL: [*calls((LIST,)), Reply(text="Here is your workout!")]})

    result = await run_step(
        step(), kit=forced(model, TalkingRunner()), scope=scope(), emit=lambda _: None
    )

    assert isinstance(result, StepResult) and not result.ok
    assert result.ended == "no_tool_call"
    assert result.error is not None and result.error.code == "no_tool_call"


async def test_ten_iterations_without_idle_end_with_max_iterations() -> None:
    def again(request: ModelRequest) -> Reply:
        n = sum(m.role == "assistant" for m in request.messages)
        return Reply(tool_calls=(ToolCall(id=f"n{n}", name="programs_list", input={}),))

    model = FunctionModel(again)
    runner = TalkingRunner()

    result = await run_step(step(), kit=forced(model, runner), scope=scope(), emit=lambda _: None)

    assert isinstance(result, StepResult) and not result.ok
    assert result.ended == "max_iterations" and len(model.calls) == 10
    assert result.error is not None and result.error.code == "max_iterations"
    assert "10 iterations" in result.error.message
    # Past the step's tool-call budget (4) tools are refused; the loop itself goes on.
    assert len(runner.runs) == 4


async def test_the_iteration_limit_is_the_kit_s() -> None:
    model = per_goal({GOAL: calls((LIST,), (LIST,), (IDLE,))})

    result = await run_step(
        step(), kit=forced(model, TalkingRunner(), max_iterations=2), scope=scope(),
        emit=lambda _: None,
    )  # fmt: skip

    assert isinstance(result, StepResult) and result.ended == "max_iterations"
    assert len(model.calls) == 2


async def test_asking_the_user_suspends_and_the_answer_is_the_question_s_result() -> None:
    runner = TalkingRunner()
    model = per_goal({GOAL: calls((ASK,))})
    plan = Plan(strategy="tool", reasoning="one loop", steps=[step()])

    outcome = await run_plan(plan, kit=forced(model, runner), scope=scope(), emit=lambda _: None)

    assert isinstance(outcome, PlanSuspended)
    [paused] = outcome.suspended
    assert paused.pending == (
        PendingCall(tool_use_id="q1", tool="message.ask_user", input=ASK.input, needs="answer",
                    prompt="Dumbbells?", options=("yes", "no")),
    )  # fmt: skip
    assert pending_events(paused) == [
        QuestionPending(tool_use_id="q1", question="Dumbbells?", options=["yes", "no"])
    ]
    # The suspension survives the log; the answer then goes on in the same loop.
    [restored] = restore(event_data(parse_event(event_data(suspension_event(plan, outcome)))))[
        1
    ].suspended
    runner.answers["q1"] = "Yes, 10 kg"
    model = per_goal({GOAL: [*calls((ASK,), (NOTIFY,), (IDLE,))]})
    events: list[Event] = []

    result = await resume_step(
        plan.steps[0], restored, kit=forced(model, runner), scope=scope(), emit=events.append,
        final_answer=True,
    )  # fmt: skip

    assert isinstance(result, StepResult) and (result.ok, result.ended) == (True, "idle")
    answer = model.calls[0].messages[-1].parts[0]
    assert isinstance(answer, ToolResult) and answer.tool_use_id == "q1"
    assert answer.content == '{"answer":"Yes, 10 kg"}' and not answer.is_error
    assert [r.tool_choice for r in model.calls] == ["any", "any"]


async def test_a_complex_plan_s_step_runs_the_forced_loop() -> None:
    other = "Check the schedule"
    model = per_goal({GOAL: calls((LIST,), (NOTIFY,), (IDLE,)), other: calls((IDLE,))})
    plan = Plan(
        strategy="complex", reasoning="two", executors=2,
        steps=[step(), PlannedStep(id="s2", goal=other, tools=["programs.list"])],
    )  # fmt: skip
    events: list[Event] = []

    outcome = await run_plan(
        plan, kit=forced(model, TalkingRunner()), scope=scope(), emit=events.append
    )

    assert isinstance(outcome, PlanResult) and outcome.ok
    assert [(r.ended, r.summary) for r in outcome.results] == [
        ("idle", "Here it is."),
        ("idle", "(the agent went idle without a message to the user)"),
    ]
    said = [e for e in events if isinstance(e, TextDelta)]
    assert said == [TextDelta(delta="Here it is.", step_id="s1")]  # a step's text, not the answer
    assert {r.tool_choice for r in model.calls} == {"any"}


async def test_the_default_loop_is_unchanged() -> None:
    model = per_goal({GOAL: [*calls((LIST,)), Reply(text="Two programs.")]})

    result = await run_step(
        step(), kit=kit(model, TalkingRunner()), scope=scope(), emit=lambda _: None
    )

    assert isinstance(result, StepResult) and (result.ended, result.summary) == (
        "answered", "Two programs.",
    )  # fmt: skip
    assert [r.tool_choice for r in model.calls] == ["auto", "auto"]
    assert {t.name for t in model.calls[0].tools} == {"programs_list"}
    assert not isinstance(result, Suspended)


def one_tool_results(message: Any) -> list[tuple[str, bool, bool]]:
    """(tool_use_id, is_error, refused as one_tool_per_turn) of a results message."""
    return [
        (part.tool_use_id, part.is_error, '"code":"one_tool_per_turn"' in part.content)
        for part in message.parts
        if isinstance(part, ToolResult)
    ]


async def test_one_tool_per_iteration_is_asked_and_enforced() -> None:
    """Trainer spec §12.1: a reply with two calls runs the first; the second gets a typed
    result saying it did not run, so every call still has its result."""
    model = per_goal({GOAL: calls((LIST, NOTIFY), (NOTIFY,), (IDLE,))})
    runner, events = TalkingRunner(), list[Event]()

    result = await run_step(
        step(), kit=forced(model, runner), scope=scope(), emit=events.append, final_answer=True
    )

    assert isinstance(result, StepResult) and (result.ended, result.summary) == (
        "idle", "Here it is.",
    )  # fmt: skip
    assert [name for name, _ in runner.runs] == [
        "programs.list", "message.notify_user", "agent.idle",
    ]  # fmt: skip
    assert [r.parallel_tool_calls for r in model.calls] == [False, False, False]
    assert one_tool_results(model.calls[1].messages[-1]) == [
        ("t1", False, False),
        ("t2", True, True),
    ]
    refused = [e for e in events if isinstance(e, ToolCompleted) and not e.ok]
    assert [(e.tool_use_id, e.error.code if e.error else None) for e in refused] == [
        ("t2", "one_tool_per_turn")
    ]
    # said once, by the call that ran: the refused one never reached the user
    assert [e.delta for e in events if isinstance(e, TextDelta)] == ["Here it is."]
    assert (result.tool_calls, result.failed_tool_calls) == (3, 1)


async def test_an_extra_call_never_asks_the_user() -> None:
    """An extra call that would need the user (a question) is refused, not suspended on."""
    model = per_goal({GOAL: calls((LIST, ASK), (IDLE,))})
    runner = TalkingRunner()

    result = await run_step(step(), kit=forced(model, runner), scope=scope(), emit=lambda _: None)

    assert isinstance(result, StepResult) and result.ended == "idle"
    assert runner.pending == [] and [n for n, _ in runner.runs] == ["programs.list", "agent.idle"]
    assert one_tool_results(model.calls[1].messages[-1]) == [
        ("t1", False, False),
        ("q1", True, True),
    ]


async def test_a_first_call_that_asks_suspends_and_its_extra_is_refused_on_resume() -> None:
    runner = TalkingRunner()
    model = per_goal({GOAL: calls((ASK, LIST))})
    plan = Plan(strategy="tool", reasoning="one loop", steps=[step()])

    outcome = await run_plan(plan, kit=forced(model, runner), scope=scope(), emit=lambda _: None)

    assert isinstance(outcome, PlanSuspended)
    [paused] = outcome.suspended
    assert [(p.tool_use_id, p.needs) for p in paused.pending] == [("q1", "answer"), ("t1", None)]
    runner.answers["q1"] = "Yes"
    model = per_goal({GOAL: calls((ASK, LIST), (IDLE,))})

    result = await resume_step(
        plan.steps[0], paused, kit=forced(model, runner), scope=scope(), emit=lambda _: None
    )

    assert isinstance(result, StepResult) and result.ended == "idle"
    assert [n for n, _ in runner.runs] == ["agent.idle"]  # programs.list never ran
    assert one_tool_results(model.calls[0].messages[-1]) == [
        ("q1", False, False),
        ("t1", True, True),
    ]


async def test_the_default_loop_may_call_tools_in_parallel() -> None:
    model = per_goal({GOAL: [*calls((LIST, LIST)), Reply(text="Two programs.")]})
    runner = TalkingRunner()

    await run_step(step(), kit=kit(model, runner), scope=scope(), emit=lambda _: None)

    assert [r.parallel_tool_calls for r in model.calls] == [True, True]
    assert [n for n, _ in runner.runs] == ["programs.list", "programs.list"]
