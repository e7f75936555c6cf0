"""A step's Plan as most tests want it: the model, tools and system prompt, default settings; a
config with the memo's bound set; the call a servicer method is given outside a server."""
import dataclasses

from contextsvc import config, conversation as m
from contextsvc.step import Plan


def plan(mdl: m.Model, tools=(), system: m.SystemPrompt | None = None, cfg: config.Config | None = None,
         **settings) -> Plan:
    return Plan.of(mdl, list(tools), system or m.SystemPrompt(), m.CompactionSettings(), cfg or config.Config(),
                   **settings)


def memo_config(memo_bytes: int) -> config.Config:
    """The default config with server.memo_bytes set (0: the memo off; Compact measures through
    it too)."""
    cfg = config.Config()
    return dataclasses.replace(cfg, server=dataclasses.replace(cfg.server, memo_bytes=memo_bytes))


class Context:
    """The call a servicer method is given outside a server: a minute left, its caller there."""

    def time_remaining(self):
        return 60.0

    def is_active(self):
        return True

    def if_abandoned(self, undo):
        return True  # never abandoned: nothing to undo
