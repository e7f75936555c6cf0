"""The gRPC servicer: protobuf -> core types -> core call -> protobuf. Nothing else.

A method whose request carries a conversation takes it with the bytes it came in
(conversion.Received, from conversion.parser with the servicer's memo) or, called directly, as a
message.

Checks and conversions are conversion's; errors raised by either are mapped to statuses by
calls.py (statuses.py's table).
"""
from __future__ import annotations

from typing import Callable

from .. import assemble, compact, prune, prune_fit, truncation
from ..count_endpoints import CountEndpoints
from . import conversion
from ..config import Config
from ..deadline import NO_DEADLINE, Deadline
from ..memo import Memo
from ..tokens import ExactCounters
from ..v1 import context_pb2 as pb
from ..v1 import context_pb2_grpc as pb_grpc


def _deadline(context) -> Deadline:
    """The caller's deadline and cancellation, for the core to check between steps of its work,
    and where it keeps what to undo should the caller not get the answer (none without a gRPC
    context: the servicer called directly)."""
    if context is None:
        return NO_DEADLINE
    return Deadline.after(context.time_remaining(), cancelled=lambda: not context.is_active(),
                          if_abandoned=context.if_abandoned)


def _tenant(context) -> str:
    """The tenant the caller's token names: its stored outputs are its own ("" without tokens)."""
    return "" if context is None else context.tenant


class ContextService(pb_grpc.ContextServiceServicer):
    def __init__(self, cfg: Config, metrics=None, truncation=None):
        self._cfg = cfg
        self._metrics = metrics
        self._exact = ExactCounters(cfg.measure.exact_encoding, cfg.measure.exact_cache_entries,
                                    CountEndpoints(cfg.measure))
        self._truncation = truncation
        self._json_depth = cfg.server.max_json_depth
        self._memo = Memo(cfg.server.memo_bytes, cfg.server.memo_hold_seconds) if cfg.server.memo_bytes else None
        if metrics is not None and self._memo is not None:
            metrics.watch_memo(self._memo)
        self._summarizer = compact.make_summarizer(cfg, self._memo)

    @property
    def memo(self) -> Memo | None:
        """What earlier calls computed, shared by every method (None when server.memo_bytes is 0):
        the transport's parse reads it too (conversion.parser)."""
        return self._memo

    def Measure(self, request: pb.MeasureRequest | conversion.Received, context) -> pb.MeasureResponse:
        deadline = _deadline(context)
        request, wire, resumed = conversion.received(request)
        inp = conversion.step_input(request, self._cfg.server.max_session_id_bytes, self._memo,
                                    self._json_depth, deadline, wire, resumed)
        r = assemble.run(inp, self._cfg, serialize=False, hashes=request.want_cache_state,
                          exact_counters=self._exact, deadline=deadline, memo=self._memo)
        if self._metrics is not None:
            m = r.measurement
            self._metrics.record_measure(inp.model.provider, m.overflow or m.should_compact)
        return conversion.measure_response(r)

    def Prune(self, request: pb.PruneRequest | conversion.Received, context) -> pb.PruneResponse:
        deadline = _deadline(context)
        request, wire, resumed = conversion.received(request)
        reason, mdl, needed, tools, system = conversion.prune_input(request, self._cfg.server.max_session_id_bytes,
                                                                    self._memo, self._json_depth)
        conv = conversion.request_conversation(request, self._memo, self._json_depth, deadline, wire, resumed)
        r = prune_fit.prune_to_fit(conv, reason, conversion.compaction_settings(request.compaction), self._cfg,
                                   model=mdl, tools=tools, system=system, tokens_needed=needed, memo=self._memo,
                                   deadline=deadline)
        if self._metrics is not None:
            self._metrics.record_prune(r.reason, r.acted, r.tokens_freed)
        return conversion.prune_response(r, request.reason)

    def Compact(self, request: pb.CompactRequest | conversion.Received, context) -> pb.CompactResponse:
        deadline = _deadline(context)
        request, wire, resumed = conversion.received(request)
        inp = conversion.compact_input(request, self._cfg.server.max_session_id_bytes, self._memo,
                                       self._json_depth, deadline, wire, resumed)
        r = compact.compact(inp, self._cfg, self._summarizer, deadline, memo=self._memo)
        if self._metrics is not None:
            self._metrics.record_compaction(r.outcome, r.backend, r.fell_back, r.retention)
            if r.post_prune is not None:
                p = r.post_prune
                self._metrics.record_prune(p.reason, p.acted, p.tokens_freed)
        return conversion.compact_response(r)

    def serialized(self, method: str) -> Callable[[object, object], bytes]:
        """The transport's call of a method: its response's bytes. Assemble's body, as large as
        its history, is copied once, into those bytes (conversion.assemble_wire), rather than
        into the response message and out of it again."""
        if method == "Assemble":
            return lambda request, context: conversion.assemble_wire(self._assemble(request, context))
        call = getattr(self, method)
        return lambda request, context: call(request, context).SerializeToString()

    def Assemble(self, request: pb.AssembleRequest | conversion.Received, context) -> pb.AssembleResponse:
        return conversion.assemble_response(self._assemble(request, context))

    def _assemble(self, request: pb.AssembleRequest | conversion.Received, context) -> assemble.Assembled:
        deadline = _deadline(context)
        request, wire, resumed = conversion.received(request)
        inp = conversion.step_input(request, self._cfg.server.max_session_id_bytes, self._memo,
                                    self._json_depth, deadline, wire, resumed)
        r = assemble.assemble(inp, self._cfg, exact_counters=self._exact, deadline=deadline, memo=self._memo)
        if self._metrics is not None:
            m = r.measurement
            self._metrics.record_measure(inp.model.provider, m.overflow or m.should_compact)
            self._metrics.record_assemble(inp.model.provider, len(r.breakpoints), r.report, r.guard_tripped,
                                          r.over_payload_limit, inp.previous_cache_state)
            if r.guard_tripped:  # the guard's payload-limit prune ran
                self._metrics.record_prune(prune.PAYLOAD_LIMIT, bool(r.pruned_part_ids), r.tokens_pruned)
        return r

    def TruncateToolOutput(self, request: pb.TruncateToolOutputRequest, context):
        settings = self._cfg.truncation
        direction = conversion.truncate_input(request)
        r = truncation.truncate_output(
            request.text,
            max_lines=request.max_lines or settings.max_lines,
            max_bytes=request.max_bytes or settings.max_bytes,
            direction=direction,
            hint=request.hint or settings.hint_for(request.has_task_tool),
            store=self._truncation,
            max_read_bytes=self._read_bytes(),
            deadline=_deadline(context),
            tenant=_tenant(context),
        )
        if self._metrics is not None:
            self._metrics.truncations.labels(r.cut_by or "none").inc()
        return conversion.truncate_response(r)

    def _read_bytes(self) -> int:
        """The most text one ReadTruncated response can carry; 0 = no limit."""
        return conversion.read_text_bytes(self._cfg.server.max_response_bytes)

    def ReadTruncated(self, request: pb.ReadTruncatedRequest, context):
        conversion.check_read(request)
        r = truncation.read_lines(self._truncation, request.output_id, request.offset, request.limit,
                                  default_limit=self._cfg.truncation.read_default_limit,
                                  max_bytes=self._read_bytes(), deadline=_deadline(context),
                                  tenant=_tenant(context))
        return conversion.read_response(r)
