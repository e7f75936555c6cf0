"""The gRPC servicer: protobuf -> core types -> core call -> protobuf. Nothing else.

Errors raised by the core are mapped to statuses by interceptors.ServiceInterceptor.
"""
from __future__ import annotations

from .. import assemble, compact, prune, truncation
from . import conversion
from ..config import Config
from ..errors import BadInput
from ..deadline import NO_DEADLINE, Deadline
from ..memo import Memo
from ..tokens import ExactCounter
from ..v1 import context_pb2 as pb
from ..v1 import context_pb2_grpc as pb_grpc


_OUTCOMES = {
    compact.COMPACTED: pb.COMPACT_OUTCOME_COMPACTED,
    compact.INSUFFICIENT: pb.COMPACT_OUTCOME_INSUFFICIENT,
    compact.CONTEXT_OVERFLOW: pb.COMPACT_OUTCOME_CONTEXT_OVERFLOW,
    compact.NOTHING_TO_DO: pb.COMPACT_OUTCOME_NOTHING_TO_DO,
}


# A ReadTruncatedResponse's fields besides the text's bytes (text tag and length, three int64
# varints, eof) take at most 41 bytes; a read returns at most max_response_bytes less this.
_READ_RESPONSE_OVERHEAD = 64


def _deadline(context) -> Deadline:
    """The caller's deadline and cancellation, for the core to check between steps of its work
    (none without a gRPC context: the servicer called directly)."""
    if context is None:
        return NO_DEADLINE
    return Deadline.after(context.time_remaining(), cancelled=lambda: not context.is_active())


class ContextService(pb_grpc.ContextServiceServicer):
    def __init__(self, cfg: Config, metrics=None, truncation=None):
        self._cfg = cfg
        self._metrics = metrics
        self._exact = ExactCounter(cfg.measure.exact_encoding, cfg.measure.exact_cache_entries)
        self._truncation = truncation
        self._json_depth = cfg.server.max_json_depth
        self._memo = Memo(cfg.server.memo_bytes) if cfg.server.memo_bytes else None
        self._summarizer = compact.make_summarizer(cfg, self._memo)

    def _step_input(self, request, deadline: Deadline) -> assemble.AssembleInput:
        """The step a Measure or Assemble request describes: both take the same per-step fields."""
        conversion.require(request, "conversation", "model")
        conversion.session_id(request.conversation, self._cfg.server.max_session_id_bytes)
        return assemble.AssembleInput(
            **conversion.shared_fields(request, self._memo, self._json_depth, deadline),
            editor=conversion.editor(request.editor) if request.HasField("editor") else None,
            step=request.step,
            max_steps=request.max_steps,
            plan_reminder=request.plan_reminder,
            policy=conversion.cache_policy(request.cache_hints, request.cache_ttl),
            configured_output_tokens=request.configured_output_tokens,
            tools_disabled=request.tools_disabled,
            exact=request.exact,
            previous_cache_state=request.previous_cache_state,
        )

    def Measure(self, request: pb.MeasureRequest, context) -> pb.MeasureResponse:
        deadline = _deadline(context)
        inp = self._step_input(request, deadline)
        r = assemble.run(inp, self._cfg, serialize=False, hashes=request.want_cache_state,
                          exact_counter=self._exact, deadline=deadline, memo=self._memo)
        if self._metrics is not None:
            m = r.measurement
            self._metrics.record_measure(inp.model.provider, m.overflow or m.should_compact)
        return pb.MeasureResponse(**conversion.figures(r.measurement), cache_state=r.cache_state,
                                  cache_report=conversion.cache_report(r.report))

    def Prune(self, request: pb.PruneRequest, context) -> pb.PruneResponse:
        conversion.require(request, "conversation")
        conversion.session_id(request.conversation, self._cfg.server.max_session_id_bytes)
        deadline = _deadline(context)
        reason = conversion.prune_reason(request.reason)
        mdl = conversion.model(request.model) if request.HasField("model") else None
        r = prune.prune(conversion.conversation(request.conversation, memo=self._memo,
                                             max_json_depth=self._json_depth, deadline=deadline), reason,
                        conversion.compaction_settings(request.compaction), self._cfg, model=mdl,
                        memo=self._memo, deadline=deadline)
        if self._metrics is not None:
            self._metrics.record_prune(r.reason, r.acted, r.tokens_freed)
        return pb.PruneResponse(part_ids=r.part_ids, tokens_freed=r.tokens_freed, acted=r.acted,
                                stopped_by=r.stopped_by, reason=request.reason,
                                tokens_scanned=r.tokens_scanned)

    def Compact(self, request: pb.CompactRequest, context) -> pb.CompactResponse:
        conversion.require(request, "conversation", "model")
        conversion.session_id(request.conversation, self._cfg.server.max_session_id_bytes)
        deadline = _deadline(context)
        inp = compact.CompactInput(
            **conversion.shared_fields(request, self._memo, self._json_depth, deadline),
            overflow=request.overflow,
            auto=request.auto,
            attempts=request.attempts,
            id_prefix=request.id_prefix,
        )
        r = compact.compact(inp, self._cfg, self._summarizer, deadline, memo=self._memo)
        if self._metrics is not None:
            self._metrics.record_compaction(r.outcome, r.backend, r.fell_back, r.retention)
        out = pb.CompactResponse(
            outcome=_OUTCOMES[r.outcome], tail_start_id=r.tail_start_id or "",
            summarized_ids=r.summarized_ids, pruned_part_ids=r.pruned_part_ids,
            under_limit=r.under_limit, tokens_before=r.tokens_before, tokens_after=r.tokens_after,
            limit=r.limit, attempts=r.attempts, backend=r.backend or "", fell_back=r.fell_back,
            fallback_reason=r.fallback_reason or "", chunked=r.chunked,
            edits=[conversion.compact_edit(e) for e in r.edits], omittable_ids=r.omittable_ids,
            decision_method=r.decision_method,
        )
        if r.summary is not None:
            out.summary.CopyFrom(conversion.message_to_pb(r.summary))
        if r.continue_message is not None:
            out.continue_message.CopyFrom(conversion.message_to_pb(r.continue_message))
        if r.retention is not None:
            out.retention.CopyFrom(pb.Retention(items=r.retention.items, retained=r.retention.retained,
                                                ratio=r.retention.ratio))
        return out

    def Assemble(self, request: pb.AssembleRequest, context) -> pb.AssembleResponse:
        deadline = _deadline(context)
        inp = self._step_input(request, deadline)
        r = assemble.assemble(inp, self._cfg, exact_counter=self._exact, deadline=deadline, memo=self._memo)
        m = r.measurement
        if self._metrics is not None:
            self._metrics.record_measure(inp.model.provider, m.overflow or m.should_compact)
            self._metrics.record_assemble(inp.model.provider, len(r.breakpoints), r.report, r.guard_tripped,
                                          r.over_payload_limit)
        return pb.AssembleResponse(
            body=r.body,
            body_bytes=m.body_bytes,
            estimate=conversion.token_count(m.estimate),
            breakpoints=[pb.Breakpoint(location=b.location, segment=b.segment, prefix_bytes=b.prefix_bytes,
                                       prefix_sha256=b.prefix_sha256) for b in r.breakpoints],
            pruned_part_ids=r.pruned_part_ids,
            media_stripped=r.media_stripped,
            injected=r.injected,
            over_payload_limit=r.over_payload_limit,
            guard_tripped=r.guard_tripped,
            environment_details=r.environment_details,
            output_tokens=m.output_tokens,
            figures=pb.Figures(**conversion.figures(m)),
            cache_state=r.cache_state,
            cache_report=conversion.cache_report(r.report),
            persist=[conversion.persist_part(p) for p in r.persist],
        )

    def TruncateToolOutput(self, request: pb.TruncateToolOutputRequest, context):
        settings = self._cfg.truncation
        for name in ("max_lines", "max_bytes"):
            if getattr(request, name) < 0:
                raise BadInput(name, "must not be negative (0 means the configured default)")
        directions = {pb.TRUNCATE_DIRECTION_UNSPECIFIED: truncation.HEAD,
                      pb.TRUNCATE_DIRECTION_HEAD: truncation.HEAD,
                      pb.TRUNCATE_DIRECTION_TAIL: truncation.TAIL}
        if request.direction not in directions:
            raise BadInput("direction", f"unknown value {request.direction}")
        r = truncation.truncate_output(
            request.text,
            max_lines=request.max_lines or settings.max_lines,
            max_bytes=request.max_bytes or settings.max_bytes,
            direction=directions[request.direction],
            has_task_tool=request.has_task_tool,
            store=self._truncation,
            max_read_bytes=self._read_bytes(),
            deadline=_deadline(context),
        )
        if self._metrics is not None:
            self._metrics.truncations.labels(r.cut_by or "none").inc()
        return pb.TruncateToolOutputResponse(
            content=r.content, truncated=r.truncated, output_id=r.output_id or "",
            removed_lines=r.removed_lines, removed_bytes=r.removed_bytes, cut_by=r.cut_by or "")

    def _read_bytes(self) -> int:
        """The most text one ReadTruncated response can carry; 0 = no limit."""
        limit = self._cfg.server.max_response_bytes
        return max(1, limit - _READ_RESPONSE_OVERHEAD) if limit > 0 else 0

    def ReadTruncated(self, request: pb.ReadTruncatedRequest, context):
        if not request.output_id:
            raise BadInput("output_id", "is required")
        for name in ("offset", "limit"):
            if getattr(request, name) < 0:
                raise BadInput(name, "must not be negative")
        r = truncation.read_lines(self._truncation, request.output_id, request.offset, request.limit,
                                  default_limit=self._cfg.truncation.read_default_limit,
                                  max_bytes=self._read_bytes())
        return pb.ReadTruncatedResponse(text=r.text, total_lines=r.total_lines, offset=r.offset,
                                        lines=r.lines, eof=r.eof)
