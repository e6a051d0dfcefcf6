"""Members and programs: lookups, and the bulk publish that always asks first."""

from __future__ import annotations

from sqlalchemy import and_, bindparam, func, or_, select, update

from bosun_demo._common import (
    MEMBER_HINT,
    PROGRAM_HINT,
    STAFF,
    WORKOUT_COLUMNS,
    not_found,
    workout_of,
)
from bosun_demo._models import (
    MemberDetail,
    MemberGet,
    MemberMatches,
    MemberSearch,
    MemberSummary,
    Program,
    ProgramList,
    Programs,
    ProgramsPublish,
    ProgramsPublished,
)
from bosun_demo._tables import MemberRow, ProgramRow, WorkoutRow
from store import utcnow
from tools import ToolContext, ToolError, ToolRegistry, record_audit

toolset = ToolRegistry()

PROGRAMS_PUBLISHED = "programs.published"

_MEMBER_COLUMNS = (
    MemberRow.id,
    MemberRow.first_name,
    MemberRow.last_name,
    MemberRow.email,
    MemberRow.phone,
    MemberRow.status,
    MemberRow.notes,
    MemberRow.created_at.label("member_since"),
)
_PROGRAM_COLUMNS = (
    ProgramRow.id,
    ProgramRow.name,
    ProgramRow.description,
    ProgramRow.level,
    ProgramRow.published,
)


@toolset.tool(
    name="members.search",
    summary="Find members by name or email; returns ids to use with other tools.",
    category="read",
    confirm="never",
    roles=STAFF,
)
async def search_members(args: MemberSearch, ctx: ToolContext) -> MemberMatches:
    # Every word must match the first name, last name or email, so "sam" finds both Sams
    # and "sam rivera" finds one.
    fields = (MemberRow.first_name, MemberRow.last_name, MemberRow.email)
    words = args.query.lower().split()
    matches = [
        or_(*(func.lower(field).contains(word, autoescape=True) for field in fields))
        for word in words
    ]
    query = (
        select(MemberRow.id, *fields, MemberRow.status)
        .where(MemberRow.org_id == ctx.org_id, and_(*matches))
        .order_by(MemberRow.last_name, MemberRow.first_name, MemberRow.id)
        .limit(args.limit + 1)
    )
    if args.status is not None:
        query = query.where(MemberRow.status == args.status)
    rows = await ctx.store.db.run_read(lambda conn: conn.execute(query).all())
    members = [
        MemberSummary(
            id=row.id, name=f"{row.first_name} {row.last_name}", email=row.email, status=row.status
        )
        for row in rows[: args.limit]
    ]
    return MemberMatches(members=members, more=len(rows) > args.limit)


@toolset.tool(
    name="members.get",
    summary="One member's details, notes and latest workouts, by member id.",
    category="read",
    confirm="never",
    roles=STAFF,
)
async def get_member(args: MemberGet, ctx: ToolContext) -> MemberDetail:
    async with ctx.store.db.read() as conn:
        member = (
            await conn.execute(
                select(*_MEMBER_COLUMNS).where(
                    MemberRow.id == args.member_id, MemberRow.org_id == ctx.org_id
                )
            )
        ).first()
        if member is None:
            raise not_found("member", args.member_id, MEMBER_HINT)
        workouts = await conn.execute(
            select(*WORKOUT_COLUMNS)
            .where(WorkoutRow.org_id == ctx.org_id, WorkoutRow.member_id == args.member_id)
            .order_by(WorkoutRow.scheduled_for.desc().nulls_last(), WorkoutRow.created_at.desc())
            .limit(5)
        )
        return MemberDetail(**member._asdict(), workouts=[workout_of(w) for w in workouts])


_PROGRAMS = (
    select(*_PROGRAM_COLUMNS)
    .where(ProgramRow.org_id == bindparam("org_id"))
    .order_by(ProgramRow.name, ProgramRow.id)
    .limit(50)
)  # built once: its cache key too (building it cost more than running it)


@toolset.tool(
    name="programs.list",
    summary="List the studio's training programs, optionally only (un)published or one level.",
    category="read",
    confirm="never",
)
async def list_programs(args: ProgramList, ctx: ToolContext) -> Programs:
    query = _PROGRAMS
    if args.published is not None:
        query = query.where(ProgramRow.published == args.published)
    if args.level is not None:
        query = query.where(ProgramRow.level == args.level)
    params = {"org_id": ctx.org_id}
    rows = await ctx.store.db.run_read(lambda conn: conn.execute(query, params).all())
    return Programs(programs=[Program.model_validate(r, from_attributes=True) for r in rows])


@toolset.tool(
    name="programs.publish_bulk",
    summary="Publish (or unpublish) several programs at once; the user always approves first.",
    category="write",
    confirm="always",
    roles=STAFF,
    audit=PROGRAMS_PUBLISHED,
)
async def publish_programs(args: ProgramsPublish, ctx: ToolContext) -> ProgramsPublished:
    ids = list(dict.fromkeys(args.program_ids))
    scope = (ProgramRow.org_id == ctx.org_id, ProgramRow.id.in_(ids))
    async with ctx.store.db.write() as conn:
        before = {
            row.id: row.published
            for row in await conn.execute(select(ProgramRow.id, ProgramRow.published).where(*scope))
        }
        missing = [i for i in ids if i not in before]
        if missing:
            # All or nothing: a half-applied bulk change is harder to explain than none.
            raise ToolError(
                "not_found",
                f"No program with id {', '.join(map(repr, missing))} in this org; nothing changed",
                hint=PROGRAM_HINT,
            )
        changed = [i for i in ids if before[i] != args.published]
        if changed:
            await conn.execute(
                update(ProgramRow)
                .where(*scope, ProgramRow.id.in_(changed))
                .values(published=args.published, updated_at=utcnow())
            )
            await record_audit(
                conn,
                ctx,
                PROGRAMS_PUBLISHED,
                target=f"programs:{len(changed)}",
                detail={"program_ids": changed, "published": args.published},
            )
        rows = await conn.execute(
            select(*_PROGRAM_COLUMNS).where(*scope).order_by(ProgramRow.name, ProgramRow.id)
        )
        programs = [Program.model_validate(r, from_attributes=True) for r in rows]
    return ProgramsPublished(programs=programs, changed=changed)
