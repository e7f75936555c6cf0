"""What every streamed write and idle stream shares on the asyncio transport."""
from __future__ import annotations

import asyncio


class StreamIdle(Exception):
    """A stream had no message either way for `server.stream_idle_seconds`: the handler ends it
    CANCELLED with this reason."""


class WriteStalled(asyncio.CancelledError):
    """The client did not take a message within the time given: the call is dropped. grpc can
    send no status while a message waits, nor let a handler cancel its call: the transport keeps
    the message until the client reads it or its connection closes, and the client's own
    deadline ends the call on its side."""


async def write_within(context, message, seconds: float) -> None:
    """Sends message on a stream, or raises WriteStalled when its client has not taken it within
    seconds."""
    try:
        # a timeout on this task, not wait_for: that wraps the write in a task of its own per call
        async with asyncio.timeout(seconds):
            await context.write(message)
    except TimeoutError:
        raise WriteStalled() from None
