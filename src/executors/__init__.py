"""Bounded executor sub-agents that run a plan's steps as tool loops, and the merge."""
