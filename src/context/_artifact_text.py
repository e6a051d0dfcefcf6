"""How a model is shown an artifact: ``<artifact type="…" id="…" version="n">summary</artifact>``.

The summary only: the payload can be large and the model has it from the tool that made
the artifact (or reads it with ``artifacts.get``), so the transcript stays small and its
prefix stable. Attribute values and the summary are XML-escaped, so a summary cannot
close the tag or forge another.
"""

from __future__ import annotations

from typing import Protocol
from xml.sax.saxutils import escape, quoteattr

from events import ArtifactSaved


class _Stored(Protocol):
    """A stored artifact version (``store.ArtifactRecord``)."""

    @property
    def id(self) -> str: ...
    @property
    def version(self) -> int: ...
    @property
    def type(self) -> str: ...
    @property
    def summary(self) -> str: ...


def artifact_text(artifact: ArtifactSaved | _Stored) -> str:
    """The one-line tag a model sees for an ``artifact`` event or a stored artifact."""
    if isinstance(artifact, ArtifactSaved):
        kind, ident = artifact.artifact_type, artifact.artifact_id
    else:
        kind, ident = artifact.type, artifact.id
    attributes = f'type={quoteattr(kind)} id={quoteattr(ident)} version="{artifact.version}"'
    return f"<artifact {attributes}>{escape(artifact.summary)}</artifact>"
