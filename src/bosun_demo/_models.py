"""Input and output models of the demo tools: the schemas the model sees and is held to.

Inputs forbid unknown fields, so a model that invents an argument gets a validation error
naming it instead of a silently ignored value.
"""

from __future__ import annotations

from datetime import date
from typing import Annotated, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator

Id = Annotated[str, Field(min_length=1, max_length=64)]
MemberStatus = Literal["active", "paused", "cancelled"]
Level = Literal["beginner", "intermediate", "advanced"]
SessionStatus = Literal["scheduled", "cancelled"]


class Input(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


# members


class MemberSearch(Input):
    query: str = Field(min_length=1, max_length=100, description="Name(s) or email, any case")
    status: MemberStatus | None = None
    limit: int = Field(default=10, ge=1, le=25)


class MemberSummary(BaseModel):
    id: str
    name: str
    email: str
    status: MemberStatus


class MemberMatches(BaseModel):
    members: list[MemberSummary]
    more: bool = Field(description="More members matched than the limit")


class MemberGet(Input):
    member_id: Id


# programs


class ProgramList(Input):
    published: bool | None = Field(default=None, description="Only published/unpublished")
    level: Level | None = None


class Program(BaseModel):
    id: str
    name: str
    description: str
    level: Level
    published: bool


class Programs(BaseModel):
    programs: list[Program]


class ProgramsPublish(Input):
    program_ids: list[Id] = Field(min_length=1, max_length=50)
    published: bool = Field(default=True, description="false unpublishes them")


class ProgramsPublished(BaseModel):
    programs: list[Program]
    changed: list[str] = Field(description="Ids whose published flag changed")


# workouts


class WorkoutCreate(Input):
    title: str = Field(min_length=1, max_length=200)
    duration_min: int = Field(default=60, ge=5, le=300)
    scheduled_for: AwareDatetime | None = None
    member_id: Id | None = None
    program_id: Id | None = None
    notes: str = Field(default="", max_length=2000)


class WorkoutUpdate(Input):
    """A patch: only the fields present change (an explicit null clears a nullable field)."""

    workout_id: Id
    title: str | None = Field(default=None, min_length=1, max_length=200)
    duration_min: int | None = Field(default=None, ge=5, le=300)
    scheduled_for: AwareDatetime | None = Field(default=None, description="null unschedules")
    member_id: Id | None = Field(default=None, description="null detaches the member")
    program_id: Id | None = Field(default=None, description="null detaches the program")
    notes: str | None = Field(default=None, max_length=2000)


class WorkoutRef(Input):
    workout_id: Id


class Workout(BaseModel):
    id: str
    title: str
    duration_min: int
    scheduled_for: AwareDatetime | None
    member_id: str | None
    program_id: str | None
    notes: str


class WorkoutDeleted(BaseModel):
    id: str
    title: str
    deleted: bool = True


class MemberDetail(BaseModel):
    id: str
    first_name: str
    last_name: str
    email: str
    phone: str | None
    status: MemberStatus
    notes: str | None
    member_since: AwareDatetime
    workouts: list[Workout] = Field(description="Latest scheduled workouts, newest first")


# class sessions


class SessionSchedule(Input):
    title: str = Field(min_length=1, max_length=200)
    coach: str = Field(min_length=1, max_length=100)
    starts_at: AwareDatetime
    duration_min: int = Field(default=60, ge=15, le=240)
    capacity: int = Field(default=12, ge=1, le=100)


class SessionCancel(Input):
    session_id: Id
    reason: str = Field(default="", max_length=500)


class ClassSession(BaseModel):
    id: str
    title: str
    coach: str
    starts_at: AwareDatetime
    duration_min: int
    capacity: int
    status: SessionStatus


# tasks


class TaskCreate(Input):
    title: str = Field(min_length=1, max_length=200)
    due_on: date | None = None
    assignee: str | None = Field(default=None, max_length=128)


class TaskList(Input):
    done: bool = Field(default=False, description="true lists completed tasks instead")
    limit: int = Field(default=20, ge=1, le=50)


class TaskRef(Input):
    task_id: Id


class Task(BaseModel):
    id: str
    title: str
    due_on: date | None
    done: bool
    assignee: str | None


class Tasks(BaseModel):
    tasks: list[Task]
    more: bool = Field(description="More tasks than the limit")


class TaskDeleted(BaseModel):
    id: str
    title: str
    deleted: bool = True


# the user picker


class Candidate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: Id
    label: str = Field(min_length=1, max_length=200)
    sublabel: str | None = Field(default=None, max_length=200)


class PickRequest(Input):
    kind: str = Field(
        default="item", min_length=1, max_length=32, description="What is picked, e.g. member"
    )
    prompt: str = Field(min_length=1, max_length=200, description="The question, e.g. Which Sam?")
    candidates: list[Candidate] = Field(min_length=2, max_length=8)

    @field_validator("candidates")
    @classmethod
    def _distinct_ids(cls, candidates: list[Candidate]) -> list[Candidate]:
        ids = [c.id for c in candidates]
        if len(set(ids)) != len(ids):
            raise ValueError(f"candidate ids must be distinct, got {ids}")
        return candidates


class Picked(BaseModel):
    """The user's pick, which the runner records as the picker's output."""

    id: str
    label: str
    kind: str
