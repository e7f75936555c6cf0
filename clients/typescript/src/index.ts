// The package: the typed client, the apply helpers and every generated message type and enum.
export { connect, ContextService, ConnectOptions, RetryOptions, RETRY_DEFAULTS } from "./client";
export { applyAssemble, applyCompaction, applyPrune, applyPersist, clientToolName } from "./apply";
export * from "./gen/contextsvc/v1/context";
