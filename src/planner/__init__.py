"""Triage, plans and source selection by a cheap planner model; planner-only dry runs."""
