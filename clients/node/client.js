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

// Every RPC as a promise-returning method, method(request, deadlineMs = options.deadlineMs);
// options: { token, credentials, deadlineMs } (default deadline 30 s).
function connect(address, options = {}) {
  const pkg = load();
  const credentials = options.credentials || grpc.credentials.createInsecure();
  const service = new pkg.contextsvc.v1.ContextService(address, credentials);
  const health = new pkg.grpc.health.v1.Health(address, credentials);
  const deadlineMs = options.deadlineMs || 30000;

  function call(stub, method, request, callDeadlineMs = deadlineMs) {
    const metadata = new grpc.Metadata();
    if (options.token) metadata.set("authorization", `Bearer ${options.token}`);
    return new Promise((resolve, reject) => {
      stub[method](request, metadata, { deadline: Date.now() + callDeadlineMs }, (err, response) =>
        (err ? reject(err) : resolve(response)));
    });
  }

  const client = { close() { service.close(); health.close(); } };
  for (const method of ["Measure", "Prune", "Compact", "Assemble", "TruncateToolOutput", "ReadTruncated"]) {
    client[method] = (request, callDeadlineMs) => call(service, method, request, callDeadlineMs);
  }
  client.Check = (request = {}) => call(health, "Check", request);
  return client;
}

module.exports = { connect, load, status: grpc.status };
