"""What every streamed write and idle stream shares on the asyncio transport."""
from __future__ import annotations

import asyncio


class StreamIdle(Exception):
    """A stream had no message either way for `server.stream_idle_seconds`: the handler ends it
    CANCELLED with this reason."""


async def write_within(context, message, seconds: float) -> None:
    """Sends message on a stream, or, when its client has not taken it within seconds, drops
    the call (grpc can send no status while a message waits: the transport frees what it held
    and the client's own deadline ends the call on its side)."""
    try:
        # a timeout on this task, not wait_for: that wraps the write in a task of its own per call
        async with asyncio.timeout(seconds):
            await context.write(message)
    except TimeoutError:
        raise asyncio.CancelledError() from None
