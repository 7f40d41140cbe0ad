"""Upload tickets: what a writer hands the batching scheduler, and what it must answer to.

A ticket carries one writer's change sets into a drain; its future resolves to their segments
once the file holding them is uploaded. The writer is told through TicketOwner either way.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from pyspark_dstl.changelog.changelog_handle import Segment
from pyspark_dstl.changelog.format import ChangeSet, LogHeader


class TicketOwner(Protocol):
    """What the scheduler needs from a writer (ChangelogWriter implements it)."""

    @property
    def log_id(self) -> str: ...

    @property
    def directory(self) -> str: ...

    def log_header(self) -> LogHeader: ...

    def claim_file_stem(self) -> str | None: ...

    def on_ticket_uploaded(self, ticket: UploadTicket, path: str,
                           segments: Mapping[int, Segment]) -> None: ...

    def on_ticket_failed(self, ticket: UploadTicket) -> None: ...


@dataclass(eq=False)
class UploadTicket:
    """Change sets of one writer handed to the scheduler together; resolves to their segments."""

    owner: TicketOwner
    change_sets: tuple[ChangeSet, ...]
    size: int
    future: concurrent.futures.Future[dict[int, Segment]] = field(
        default_factory=concurrent.futures.Future)
