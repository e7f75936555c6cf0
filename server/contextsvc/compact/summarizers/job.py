"""What a summarizer backend is asked to do."""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import Unavailable
from ...deadline import NO_DEADLINE, Deadline


@dataclass(slots=True)
class SummaryJob:
    messages: list  # the head messages (compaction pairs hidden), for extractive backends
    transcript: str  # the same messages as serialized text, for model backends
    previous: str = ""  # the previous summary, "" when none
    max_tokens: int = 0  # output budget of the summary request
    deadline: Deadline = NO_DEADLINE  # the caller's: bounds the backend call's timeout


class ContextTooLong(Unavailable):
    """The summarizer refused the request as too long for its window: summarize in chunks."""
