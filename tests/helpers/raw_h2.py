"""A raw HTTP/2 gRPC client (the `h2` package) for what grpcio cannot send: streams opened and
reset at once, more streams than the server allows, a client that never opens its flow-control
window. Each stream's end is kept: its grpc-status, or the RST_STREAM code the server sent."""
from __future__ import annotations

import socket
import struct
import time

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings


def grpc_frame(message: bytes) -> bytes:
    """One gRPC length-prefixed message (uncompressed)."""
    return b"\x00" + struct.pack(">I", len(message)) + message


SOCKET_TIMEOUT = 0.2  # seconds a send, or a read of pump, waits


class RawH2:
    def __init__(self, port: int, window: int = 65535, auto_window: bool = True, source: str | None = None):
        """source: the loopback address to connect from (another client than 127.0.0.1's)."""
        self.sock = socket.create_connection(("127.0.0.1", port), source_address=(source, 0) if source else None)
        self.sock.settimeout(SOCKET_TIMEOUT)
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.conn.local_settings = h2.settings.Settings(
            client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
        self.conn.initiate_connection()
        self.auto_window = auto_window  # False: the client never reads (no WINDOW_UPDATE)
        self.status: dict[int, str] = {}  # stream -> grpc-status, or "reset:<code>"
        self.received = 0
        self.closed = False
        self.flush()

    def flush(self) -> None:
        data = self.conn.data_to_send()
        if data and not self.closed:
            try:
                self.sock.sendall(data)
            except OSError:
                self.closed = True

    def headers(self, path: str, metadata=()) -> list:
        return [(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", "localhost"),
                ("content-type", "application/grpc"), ("te", "trailers"), *metadata]

    def open(self, path: str, body: bytes | None = None, metadata=(), end: bool = True,
             ignore_limit: bool = False) -> int:
        """A new stream; body (a whole gRPC frame) sent in pieces as the window allows."""
        if ignore_limit:  # send past the server's SETTINGS_MAX_CONCURRENT_STREAMS regardless
            self.conn.remote_settings._settings[h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS] = [2 ** 31 - 1]
        sid = self.conn.get_next_available_stream_id()
        self.conn.send_headers(sid, self.headers(path, metadata), end_stream=body is None and end)
        if body is not None:
            self._send_body(sid, body, end)
        self.flush()
        return sid

    def _send_body(self, sid: int, body: bytes, end: bool) -> None:
        view = memoryview(body)
        deadline = time.monotonic() + 30
        while view:
            room = min(self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size)
            if room <= 0:
                self.flush()
                self.pump(0.05)
                if time.monotonic() > deadline or sid in self.status:
                    return
                continue
            self.conn.send_data(sid, bytes(view[:room]))
            view = view[room:]
        if end:
            self.conn.end_stream(sid)

    def reset(self, sid: int) -> None:
        self.conn.reset_stream(sid)
        self.flush()

    def pump(self, seconds: float) -> None:
        """Reads and answers frames for about seconds (each read waits at most what is left of
        them: a read waiting its socket's whole timeout would make a short pump last 0.2 s)."""
        end = time.monotonic() + seconds
        while time.monotonic() < end and not self.closed:
            try:
                self.sock.settimeout(min(SOCKET_TIMEOUT, max(end - time.monotonic(), 0.0005)))
                data = self.sock.recv(1 << 20)
            except socket.timeout:
                continue
            except OSError:
                self.closed = True
                return
            finally:
                if not self.closed:
                    self.sock.settimeout(SOCKET_TIMEOUT)  # what sends wait for
            if not data:
                self.closed = True
                return
            try:
                events = self.conn.receive_data(data)
            except h2.exceptions.ProtocolError:
                self.closed = True
                return
            for e in events:
                if isinstance(e, h2.events.DataReceived):
                    self.received += len(e.data)
                    if self.auto_window:
                        self.conn.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
                elif isinstance(e, (h2.events.TrailersReceived, h2.events.ResponseReceived)):
                    fields = dict((k.decode() if isinstance(k, bytes) else k,
                                   v.decode() if isinstance(v, bytes) else v) for k, v in e.headers)
                    if "grpc-status" in fields:
                        self.status[e.stream_id] = fields["grpc-status"]
                elif isinstance(e, h2.events.StreamReset):
                    self.status.setdefault(e.stream_id, f"reset:{e.error_code.name}")
                elif isinstance(e, h2.events.ConnectionTerminated):
                    self.closed = True
            self.flush()

    def close(self) -> None:
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass
