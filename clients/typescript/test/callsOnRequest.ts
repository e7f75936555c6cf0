// One measure() per line read from stdin, its outcome written as a line: the status code name
// (OK when answered) and the call's seconds. Usage: node dist/test/callsOnRequest.js HOST:PORT
// [--retry] (the client's retries on, with their defaults). Ends when stdin closes. With
// --over-max, one measure() of a request over maxRequestBytes instead; with --big-answer, one
// assemble() whose body is over grpc's default 4 MiB, and the body's bytes.
import readline from "node:readline";
import { ServiceError, status } from "@grpc/grpc-js";
import { connect, credentials } from "../src";
import { Provider, Role } from "../src/gen/contextsvc/v1/context";

const request = {
  conversation: { messages: [{ id: "msg_001", role: Role.ROLE_USER, parts: [{ id: "p1", text: { text: "Hello" } }] }] },
  model: { id: "claude-sonnet-4-5", provider: Provider.PROVIDER_ANTHROPIC, limits: { context: 200000, output: 64000 } },
};

async function main() {
  if (process.argv.includes("--over-max")) {
    // a request over maxRequestBytes: refused by the channel, RESOURCE_EXHAUSTED, not sent again
    const small = connect(process.argv[2], { retry: true, maxRequestBytes: 4096 });
    const big = { ...request, conversation: { messages: [{ ...request.conversation.messages[0],
      parts: [{ id: "p1", text: { text: "x".repeat(10_000) } }] }] } };
    const start = performance.now();
    const code = await small.measure(big, 20_000).then(() => "OK", (err: ServiceError) => status[err.code]);
    process.stdout.write(`${code} ${(performance.now() - start) / 1000}\n`);
    small.close();
    return;
  }
  if (process.argv.includes("--nan")) {
    // an int64 the types allow but grpc-js cannot encode: the caller's input, not a server fault
    const client = connect(process.argv[2]);
    const bad = { ...request, model: { ...request.model, limits: { context: Number.NaN, output: 64000 } } };
    const out = await client.measure(bad, 20_000).then(
      () => "OK", (err: ServiceError) => `${status[err.code]} ${err.details}`);
    process.stdout.write(`${out}\n`);
    client.close();
    return;
  }
  if (process.argv.includes("--big-answer")) {
    const client = connect(process.argv[2], { credentials: credentials.createInsecure() });
    const big = { ...request, conversation: { messages: [{ ...request.conversation.messages[0],
      parts: [{ id: "p1", text: { text: "x".repeat(5 * 1024 * 1024) } }] }] } };
    const out = await client.assemble(big, 20_000).then((r) => `OK ${r.body.length}`,
      (err: ServiceError) => `${status[err.code]} ${err.details}`);
    process.stdout.write(`${out}\n`);
    client.close();
    return;
  }
  const client = connect(process.argv[2], { retry: process.argv.includes("--retry") });
  for await (const _ of readline.createInterface({ input: process.stdin })) {
    const start = performance.now();
    const code = await client.measure(request, 20_000).then(() => "OK", (err: ServiceError) => status[err.code]);
    process.stdout.write(`${code} ${(performance.now() - start) / 1000}\n`);
  }
  client.close();
}

main();
