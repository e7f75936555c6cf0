"""A step's Plan as most tests want it: the model, tools and system prompt, default settings."""
from contextsvc import config, conversation as m
from contextsvc.step import Plan


def plan(mdl: m.Model, tools=(), system: m.SystemPrompt | None = None, cfg: config.Config | None = None,
         **settings) -> Plan:
    return Plan.of(mdl, list(tools), system or m.SystemPrompt(), m.CompactionSettings(), cfg or config.Config(),
                   **settings)
