// The package: the typed client, the apply helpers and every generated message type and enum.
export {
  connect, ContextService, ConnectOptions, RetryOptions, RETRY_DEFAULTS, MAX_REQUEST_BYTES, MAX_RESPONSE_BYTES,
} from "./client";
// the package's own @grpc/grpc-js: credentials made with an app's copy (a second one, where the
// package is installed from a path) are refused ("Channel credentials must be a
// ChannelCredentials object")
export { ChannelCredentials, Metadata, ServiceError, credentials, status } from "@grpc/grpc-js";
export { applyAssemble, applyCompaction, applyPrune, applyPersist, clientToolName } from "./apply";
export { ProviderUsage, usageFrom } from "./usage";
export * from "./gen/contextsvc/v1/context";
