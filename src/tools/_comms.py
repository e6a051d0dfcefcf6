"""The communication tools of a forced-tools agent (trainer spec §6.3): ``agent.idle``,
``message.ask_user`` and ``message.notify_user`` (declared in ``tools._notify_user``).

A forced-tools agent answers only through tool calls, so talking to the user, asking the
user and stopping are tools too. They are offered to such an agent whatever its ``tools``
grant (``fleet`` adds them). The executor's forced loop reads them by name: ``idle`` ends
the loop, ``message_ask_user`` (a ``user_question``: it has no handler, the user's next
message is its output) suspends the turn, and each ``message_notify_user`` message is
what the user was told.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from tools._notify_user import NOTIFY_USER, NOTIFY_USER_TOOL
from tools._registry import ToolDef, ToolRegistry
from tools._runtime import ToolContext

IDLE_TOOL = "agent.idle"
ASK_USER_TOOL = "message.ask_user"
NOTIFY_TOOL = NOTIFY_USER_TOOL
COMMUNICATION_TOOLS = frozenset({IDLE_TOOL, ASK_USER_TOOL, NOTIFY_TOOL})
"""Registry names of the communication tools (``message.*`` and ``agent.idle``)."""


class IdleIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str = Field(min_length=1, max_length=500, description="Why there is nothing to do.")


class IdleOut(BaseModel):
    idle: Literal[True] = True
    reason: str


class AskUserIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=2000, description="The question to ask.")
    options: list[Annotated[str, Field(min_length=1, max_length=200)]] | None = Field(
        default=None, max_length=8, description="Suggested answers the user may pick from."
    )


class Answer(BaseModel):
    """What a question's result holds: the user's next message, verbatim."""

    answer: str


async def _idle(args: IdleIn, ctx: ToolContext) -> IdleOut:
    """Nothing happens: the executor's forced loop ends when this call succeeds."""
    del ctx
    return IdleOut(reason=args.reason)


IDLE = ToolDef(
    name=IDLE_TOOL,
    summary=(
        "Signal that all tasks are complete and stop. Always tell the user the result with "
        "message_notify_user first."
    ),
    input_model=IdleIn,
    output_model=IdleOut,
    category="read",
    confirm="never",
    handler=_idle,
)

ASK_USER = ToolDef(
    name=ASK_USER_TOOL,
    summary=(
        "Ask the user a question and wait for the reply (their next message is the "
        "result); only when you cannot go on without it."
    ),
    input_model=AskUserIn,
    output_model=Answer,
    category="read",
    confirm="never",
    kind="user_question",
)


def communication_tools() -> ToolRegistry:
    """``idle``, ``message_ask_user`` and ``message_notify_user``: the tools every
    forced-tools agent is offered."""
    return ToolRegistry([NOTIFY_USER, ASK_USER, IDLE])
