"""Bounded executor sub-agents that run a plan's steps as tool loops, and the merge.

``run_plan`` schedules a plan's steps (concurrently where dependencies allow) and runs
each with ``run_step``, a bounded tool loop; ``merge`` writes a ``complex`` plan's answer.
A step that needs the user comes back ``Suspended``; ``pending_events`` gives the
``confirmation_pending``/``disambiguation_pending`` events, ``suspension_event`` the log
event a resume starts from (``restore``, then ``run_plan(resume=...)``).
``repair_transcript`` is the replay-integrity guard run before every executor model call.
See docs/executors.md.
"""

from executors._config import (
    Emit,
    ExecutorKit,
    ExecutorLimits,
    Loop,
    StepCounter,
    StepShare,
    ToolRunnerLike,
    TurnScope,
)
from executors._loop import resume_step, run_step
from executors._merge import ANSWER_PROMPT, MERGE_PROMPT, MergeResult, Writer, answer, merge
from executors._prompt import EXECUTOR_PROMPT, dependency_item
from executors._replay import REPLAY_VIOLATION, Repair, repair_transcript
from executors._results import (
    CutReason,
    PendingCall,
    StepEnd,
    StepOutcome,
    StepResult,
    Suspended,
    pending_events,
)
from executors._schedule import (
    MERGE_RESERVE,
    PlanResult,
    PlanSuspended,
    RunOutcome,
    completed_event,
    executor_id,
    run_plan,
)
from executors._snapshot import restore, suspension_event
from executors._state import WRAP_UP_SHARE

__all__ = [
    "ANSWER_PROMPT",
    "EXECUTOR_PROMPT",
    "MERGE_PROMPT",
    "MERGE_RESERVE",
    "REPLAY_VIOLATION",
    "WRAP_UP_SHARE",
    "CutReason",
    "Emit",
    "ExecutorKit",
    "ExecutorLimits",
    "Loop",
    "MergeResult",
    "PendingCall",
    "PlanResult",
    "PlanSuspended",
    "Repair",
    "RunOutcome",
    "StepCounter",
    "StepEnd",
    "StepOutcome",
    "StepResult",
    "StepShare",
    "Suspended",
    "ToolRunnerLike",
    "TurnScope",
    "Writer",
    "answer",
    "completed_event",
    "dependency_item",
    "executor_id",
    "merge",
    "pending_events",
    "repair_transcript",
    "restore",
    "resume_step",
    "run_plan",
    "run_step",
    "suspension_event",
]
