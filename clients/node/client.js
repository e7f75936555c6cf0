// ContextService client for Node.js: @grpc/grpc-js with the service's own .proto, loaded at run
// time by @grpc/proto-loader (no generated code to keep in sync).
"use strict";

const path = require("node:path");
const grpc = require("@grpc/grpc-js");
const protoLoader = require("@grpc/proto-loader");

const REPO_PROTO = path.resolve(__dirname, "..", "..", "proto");
const LOCAL_PROTO = path.resolve(__dirname, "proto");

// int64 as strings would be exact; the service's counts fit a double, so plain numbers are kept
const LOADER_OPTIONS = { keepCase: true, longs: Number, enums: String, defaults: true, oneofs: true };

function load(protoDir = process.env.CONTEXTSVC_PROTO_DIR || REPO_PROTO) {
  const definition = protoLoader.loadSync(
    ["contextsvc/v1/context.proto", "grpc/health/v1/health.proto"],
    { ...LOADER_OPTIONS, includeDirs: [protoDir, LOCAL_PROTO] });
  return grpc.loadPackageDefinition(definition);
}

// Retries (README, "Retries"): a call answered UNAVAILABLE (a server stopping, or not there) or
// CANCELLED (grpc dropping a call that reached a server in the instant its listener closed; these
// calls are never cancelled by the caller) is sent again; every other code is final. attempts
// counts the first call; the n-th retry waits a random time between half and all of
// min(initialBackoffMs * 2^(n-1), maxBackoffMs). The call's deadline bounds the attempts and
// waits together: no retry starts that would end after it.
const RETRYABLE = [grpc.status.UNAVAILABLE, grpc.status.CANCELLED];
const RETRY_DEFAULTS = { attempts: 10, initialBackoffMs: 100, maxBackoffMs: 2000 };
// A larger request is refused by the channel itself, RESOURCE_EXHAUSTED, never sent: the server's
// default server.max_request_bytes (raise both together; options.maxRequestBytes). A proxy in
// front ends a request over the server's limit as CANCELLED, which would be retried.
const MAX_REQUEST_BYTES = 64 * 1024 * 1024;
// What the channel takes in: grpc's own default of 4 MiB refused an Assemble body with one 3.5 MB
// screenshot, RESOURCE_EXHAUSTED, at every later step; the server's default server.max_response_bytes.
const MAX_RESPONSE_BYTES = 64 * 1024 * 1024;

function retryPolicy(retry) {
  return retry ? { ...RETRY_DEFAULTS, ...(retry === true ? {} : retry) } : { ...RETRY_DEFAULTS, attempts: 1 };
}

function backoffMs(policy, retry) {
  const ceiling = Math.min(policy.initialBackoffMs * 2 ** (retry - 1), policy.maxBackoffMs);
  return ceiling / 2 + Math.random() * ceiling / 2;
}

// Every RPC as a promise-returning method, method(request, deadlineMs = options.deadlineMs);
// options: { token, credentials, deadlineMs (default 30 s), retry, maxRequestBytes, maxResponseBytes } where retry
// is true (the defaults above) or { attempts, initialBackoffMs, maxBackoffMs }; off unless given.
function connect(address, options = {}) {
  const pkg = load();
  const credentials = options.credentials || grpc.credentials.createInsecure();
  const policy = retryPolicy(options.retry);
  // the channel reconnects as often as calls retry (grpc's own backoff grows to 120 s, and a call
  // made while the channel waits to reconnect fails at once)
  const channelOptions = {
    "grpc.max_send_message_length": options.maxRequestBytes || MAX_REQUEST_BYTES,
    "grpc.max_receive_message_length": options.maxResponseBytes || MAX_RESPONSE_BYTES,
    ...(options.retry ? { "grpc.initial_reconnect_backoff_ms": policy.initialBackoffMs,
      "grpc.max_reconnect_backoff_ms": policy.maxBackoffMs } : {}),
  };
  const service = new pkg.contextsvc.v1.ContextService(address, credentials, channelOptions);
  const health = new pkg.grpc.health.v1.Health(address, credentials, channelOptions);
  const deadlineMs = options.deadlineMs || 30000;

  function attempt(stub, method, request, deadline) {
    const metadata = new grpc.Metadata();
    if (options.token) metadata.set("authorization", `Bearer ${options.token}`);
    return new Promise((resolve, reject) => {
      stub[method](request, metadata, { deadline }, (err, response) => (err ? reject(err) : resolve(response)));
    });
  }

  async function call(stub, method, request, callDeadlineMs = deadlineMs) {
    const deadline = Date.now() + callDeadlineMs;
    for (let retry = 1; ; retry++) {
      try {
        return await attempt(stub, method, request, deadline);
      } catch (err) {
        const pause = backoffMs(policy, retry);
        if (!RETRYABLE.includes(err.code) || retry >= policy.attempts || Date.now() + pause >= deadline) {
          throw err;
        }
        await new Promise((resolve) => setTimeout(resolve, pause));
      }
    }
  }

  const client = { close() { service.close(); health.close(); } };
  for (const method of ["Measure", "Prune", "Compact", "Assemble", "TruncateToolOutput", "ReadTruncated"]) {
    client[method] = (request, callDeadlineMs) => call(service, method, request, callDeadlineMs);
  }
  client.Check = (request = {}) => call(health, "Check", request);
  return client;
}

// credentials: this package's own @grpc/grpc-js's (credentials an app makes with a copy of its own
// are refused: "Channel credentials must be a ChannelCredentials object")
module.exports = { connect, load, status: grpc.status, credentials: grpc.credentials };
