// One Measure per line read from stdin, its outcome written as a line: the status code name (OK
// when answered) and the call's seconds. Usage: node calls_on_request.js HOST:PORT [--retry]
// (the client's retries on, with their defaults). Ends when stdin closes.
"use strict";

const readline = require("node:readline");
const { connect, status } = require("./client");

const request = {
  conversation: { messages: [{ id: "msg_001", role: "ROLE_USER", parts: [{ id: "p1", text: { text: "Hello" } }] }] },
  model: { id: "claude-sonnet-4-5", provider: "PROVIDER_ANTHROPIC", limits: { context: 200000, output: 64000 } },
};

const client = connect(process.argv[2], { retry: process.argv.includes("--retry") });
const lines = readline.createInterface({ input: process.stdin });
(async () => {
  for await (const _ of lines) {
    const start = performance.now();
    const code = await client.Measure(request, 20000).then(() => "OK", (err) => status[err.code]);
    process.stdout.write(`${code} ${(performance.now() - start) / 1000}\n`);
  }
  client.close();
})();
