"""Config: the defaults of docs/design.md, TOML overrides, and loud failure on mistakes."""
from __future__ import annotations

import pytest

from contextsvc import config


def test_defaults_are_the_specs():
    c = config.Config()
    assert c.server.port == 50051 and c.server.metrics_port == 9464
    assert c.server.max_request_bytes == 64 * 1024 * 1024
    assert c.measure.output_token_max == 32_000 and str(c.measure.factor) == "13/10"
    assert c.measure.reserved_max == 20_000 and c.measure.chars_per_token == 4
    assert (c.prune.protect_tokens, c.prune.minimum_tokens, c.prune.protected_turns) == (40_000, 20_000, 2)
    assert c.prune.protected_tools == ("skill",) and c.prune.enabled is False
    assert (c.compact.tail_turns, c.compact.preserve_recent_min, c.compact.preserve_recent_max) == (2, 2000, 8000)
    assert c.compact.tool_output_max_chars == 2000 and c.compact.max_attempts == 3
    assert c.assemble.request_prune_bytes == 1_250_000
    assert c.summarizer.backend == "offline"
    assert (c.truncation.max_lines, c.truncation.max_bytes) == (2000, 51_200)


@pytest.mark.parametrize("backend,model,key_env", [("anthropic", "claude-haiku-4-5", "ANTHROPIC_API_KEY"),
                                                   ("openai", "gpt-4.1-mini", "OPENAI_API_KEY")])
def test_each_model_backend_has_its_own_model_and_key_unless_given(backend, model, key_env):
    s = config.from_mapping({"summarizer": {"backend": backend}}).summarizer
    assert (s.model, s.api_key_env) == (model, key_env)
    given = config.from_mapping({"summarizer": {"backend": backend, "model": "m", "api_key_env": "K"}}).summarizer
    assert (given.model, given.api_key_env) == ("m", "K")


def test_toml_overrides(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text('[measure]\noutput_token_max = 8000\npreflight_factor = 1.5\n'
                 '[prune]\nenabled = true\nprotected_tools = ["skill", "todo"]\n')
    c = config.load(str(p))
    assert c.measure.output_token_max == 8000 and str(c.measure.factor) == "3/2"
    assert c.prune.enabled and c.prune.protected_tools == ("skill", "todo")
    assert c.compact == config.CompactConfig()


@pytest.mark.parametrize("data,message", [
    ({"nope": {}}, "unknown config section [nope]"),
    ({"measure": {"typo": 1}}, "unknown key 'typo'"),
    ({"measure": {"output_token_max": -1}}, "non-negative integer"),
    ({"measure": {"output_token_max": "12"}}, "non-negative integer"),
    ({"prune": {"enabled": 1}}, "true or false"),
    ({"measure": {"preflight_factor": "abc"}}, "decimal number"),
    ({"summarizer": {"backend": "gpt"}}, "backend must be"),
    ({"compact": {"max_attempts": 0}}, "[compact] max_attempts must be at least 1"),
])
def test_mistakes_are_errors(data, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        config.from_mapping(data)


def test_ipv6_hosts_are_held_bare_and_bracketed_in_addresses():
    for given in ("::", "[::]"):
        s = config.ServerConfig(host=given)
        assert s.host == "::" and s.address(50051) == "[::]:50051"
    assert config.ServerConfig(host="0.0.0.0").address(9464) == "0.0.0.0:9464"


def test_every_toml_block_of_the_readme_is_a_config_the_server_takes():
    """A reader copies them as they are: each block loads (the Security one used to be refused,
    its tenants file needing the Redis store it did not set), with the tenants' block uncommented
    as its comment says."""
    import re
    import tomllib
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    blocks = re.findall(r"```toml\n(.*?)```", text, re.S)
    assert len(blocks) >= 4, "README.md's configuration examples"
    for block in blocks:
        config.from_mapping(tomllib.loads(block))
    security = next(b for b in blocks if "auth_tokens_file" in b)
    tenants = re.sub(r"^# (auth_tokens_file |\[truncation\]$|backend |redis_url )", r"\1", security, flags=re.M)
    assert tenants.count("\n# ") < security.count("\n# ")
    c = config.from_mapping(tomllib.loads(tenants))
    assert c.server.auth_tokens_file and c.truncation.backend == "redis"
