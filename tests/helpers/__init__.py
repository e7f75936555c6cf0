"""What the test suites share: conversations to send (convo, corpus), a server on loopback
(server), process launching (processes), metrics scraping (metrics), ready-made requests (rpc),
a fake Anthropic Messages API (fake_anthropic) and OpenAI Chat Completions API (fake_openai), a body in cache order (prefix), a real Redis
(redis_server) and the TypeScript client built (typescript).

tests/ and bench/ are on sys.path through pyproject's [tool.pytest.ini_options] pythonpath."""
