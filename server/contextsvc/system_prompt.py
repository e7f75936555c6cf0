"""The system prompt: five segments in stability order, collapsed to at most two blocks."""
from __future__ import annotations

import os
import re

from . import conversation as m

# Model-id rules for the family prompt, first match wins (docs/design.md §6).
_FAMILY_RULES = (
    (re.compile(r"gpt-4|(^|[/-])o1|(^|[/-])o3"), "beast"),
    (re.compile(r"gpt.*codex"), "codex"),
    (re.compile(r"gpt"), "gpt"),
    (re.compile(r"gemini-"), "gemini"),
    (re.compile(r"claude"), "anthropic"),
    (re.compile(r"trinity"), "trinity"),
    (re.compile(r"kimi"), "kimi"),
    (re.compile(r"ling"), "ling"),
)
_ALIASES = {"anthropic_without_todo": "default"}


def family(model: m.Model) -> str:
    """The family prompt name: model.prompt when given, else by the model id."""
    if model.prompt:
        return _ALIASES.get(model.prompt, model.prompt)
    model_id = model.id.lower()
    for pattern, name in _FAMILY_RULES:
        if pattern.search(model_id):
            return name
    return "default"


def family_prompt(model: m.Model, prompt_dir: str) -> str:
    """The operator's text for the model's family ({prompt_dir}/{name}.txt), or ''."""
    if not prompt_dir:
        return ""
    for name in (family(model), "default"):
        path = os.path.join(prompt_dir, f"{name}.txt")
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                return f.read()
    return ""


def env_block(model: m.Model, env: m.EnvInfo) -> str:
    """Static facts only: anything that changes within a session belongs to the tail. The two
    lines naming the model come first unless env.facts_only."""
    lines = [] if env.facts_only else [
        f"You are powered by the model named {model.id}.",
        "Here is some useful information about the environment you are running in:",
    ]
    lines += [
        "<env>",
        f"  Working directory: {env.working_directory}",
        f"  Is directory a git repo: {'yes' if env.is_git_repo else 'no'}",
        f"  Platform: {env.platform}",
        f"  Today's date: {env.date}",
    ]
    if env.config_dir:
        lines.append(f"  Config directory: {env.config_dir}")
    if env.shell:
        lines.append(f"  Shell: {env.shell}")
    lines.append("</env>")
    return "\n".join(lines)


def instructions_block(instructions: list) -> str:
    return "\n\n".join(f"Instructions from: {i.path}\n{i.content}" for i in instructions)


def skills_block(skills: list) -> str:
    lines = ["Skills provide specialized instructions. Load a skill when the task matches it.",
             "<available_skills>"]
    for s in skills:
        lines += ["  <skill>", f"    <name>{s.name}</name>",
                  f"    <description>{s.description}</description>", "  </skill>"]
    lines.append("</available_skills>")
    return "\n".join(lines)


def blocks(system: m.SystemPrompt, model: m.Model, prompt_dir: str = "") -> list:
    """At most two system texts: [soul, everything else joined by newlines], empties dropped (and
    whitespace alone: a provider refuses a text block of it, as in a message).

    Two blocks, not five, so that every system byte sits under one of the two system cache
    breakpoints.
    """
    rest = [
        system.agent_prompt or family_prompt(model, prompt_dir),
        env_block(model, system.env) if system.env is not None else "",
        instructions_block(system.instructions) if system.instructions else "",
        skills_block(system.skills) if system.skills else "",
    ]
    joined = "\n".join(s for s in rest if s and not s.isspace())
    return [s for s in (system.soul, joined) if s and not s.isspace()]
