// ContextService client for TypeScript: the @grpc/grpc-js stub ts-proto generates from the
// repository's proto (npm run build), with every RPC as a promise that takes a partial request.
import {
  ChannelCredentials, ChannelOptions, Metadata, ServiceError, credentials as grpcCredentials, status,
} from "@grpc/grpc-js";
import {
  AssembleRequest, AssembleResponse, CompactRequest, CompactResponse, ContextServiceClient, DeepPartial,
  MeasureRequest, MeasureResponse, PruneRequest, PruneResponse, ReadTruncatedRequest, ReadTruncatedResponse,
  TruncateToolOutputRequest, TruncateToolOutputResponse,
} from "./gen/contextsvc/v1/context";

export interface ConnectOptions {
  token?: string;                   // sent as `authorization: Bearer <token>`
  credentials?: ChannelCredentials; // default: insecure (loopback, or TLS terminated in front)
  deadlineMs?: number;              // default deadline of a call (30 s)
  channelOptions?: ChannelOptions;
  retry?: boolean | Partial<RetryOptions>; // off unless given; true: RETRY_DEFAULTS
  maxRequestBytes?: number;         // default MAX_REQUEST_BYTES
  maxResponseBytes?: number;        // default MAX_RESPONSE_BYTES
}

// A larger request is refused by the channel itself, RESOURCE_EXHAUSTED, never sent: the server's
// default server.max_request_bytes (raise both together). A proxy in front ends a request over the
// server's limit as CANCELLED, which would be retried.
export const MAX_REQUEST_BYTES = 64 * 1024 * 1024;
// What the channel takes in: grpc's own default of 4 MiB refused an Assemble body with one 3.5 MB
// screenshot, RESOURCE_EXHAUSTED, at every later step; the server's default server.max_response_bytes.
export const MAX_RESPONSE_BYTES = 64 * 1024 * 1024;

// Retries (README, "Retries"): a call answered UNAVAILABLE (a server stopping, or not there) or
// CANCELLED (grpc dropping a call that reached a server in the instant its listener closed; these
// calls are never cancelled by the caller) is sent again; every other code is final. attempts
// counts the first call; the n-th retry waits a random time between half and all of
// min(initialBackoffMs * 2^(n-1), maxBackoffMs). The call's deadline bounds the attempts and
// waits together: no retry starts that would end after it.
export interface RetryOptions {
  attempts: number;
  initialBackoffMs: number;
  maxBackoffMs: number;
}

const RETRYABLE = [status.UNAVAILABLE, status.CANCELLED];

export const RETRY_DEFAULTS: RetryOptions = { attempts: 10, initialBackoffMs: 100, maxBackoffMs: 2000 };

function retryPolicy(retry: ConnectOptions["retry"]): RetryOptions {
  return retry ? { ...RETRY_DEFAULTS, ...(retry === true ? {} : retry) } : { ...RETRY_DEFAULTS, attempts: 1 };
}

function backoffMs(policy: RetryOptions, retry: number): number {
  const ceiling = Math.min(policy.initialBackoffMs * 2 ** (retry - 1), policy.maxBackoffMs);
  return ceiling / 2 + Math.random() * ceiling / 2;
}

// A request is given as a partial object (fields left out take the proto's defaults); fromPartial
// fills them, as the generated encoder expects every field to be set.
type Rpc<Req, Res> = (request: DeepPartial<Req>, deadlineMs?: number) => Promise<Res>;

export interface ContextService {
  measure: Rpc<MeasureRequest, MeasureResponse>;
  prune: Rpc<PruneRequest, PruneResponse>;
  compact: Rpc<CompactRequest, CompactResponse>;
  assemble: Rpc<AssembleRequest, AssembleResponse>;
  truncateToolOutput: Rpc<TruncateToolOutputRequest, TruncateToolOutputResponse>;
  readTruncated: Rpc<ReadTruncatedRequest, ReadTruncatedResponse>;
  close(): void;
}

interface MessageType<T> { fromPartial(object: DeepPartial<T>): T }

// A request grpc-js could not encode (NaN, Infinity or a fraction in an int64 field: the types
// allow any number) fails in the client as INTERNAL, which reads as a server fault and names no
// field; it is the caller's input, INVALID_ARGUMENT, and was never sent.
function unsendable(err: ServiceError): boolean {
  return err.code === status.INTERNAL && /serialization failure/i.test(err.details ?? "");
}

function invalidRequest(err: ServiceError): ServiceError {
  const details = `request not sent: ${err.details} (a number field holds NaN, Infinity or a fraction ` +
    "where the proto has an integer)";
  return Object.assign(new Error(details), { code: status.INVALID_ARGUMENT, details, metadata: err.metadata });
}

export function connect(address: string, options: ConnectOptions = {}): ContextService {
  const policy = retryPolicy(options.retry);
  // the channel reconnects as often as calls retry (grpc's own backoff grows to 120 s, and a call
  // made while the channel waits to reconnect fails at once)
  const reconnect: ChannelOptions = options.retry ? { "grpc.initial_reconnect_backoff_ms": policy.initialBackoffMs,
    "grpc.max_reconnect_backoff_ms": policy.maxBackoffMs } : {};
  const stub = new ContextServiceClient(address, options.credentials ?? grpcCredentials.createInsecure(),
    { "grpc.max_send_message_length": options.maxRequestBytes ?? MAX_REQUEST_BYTES,
      "grpc.max_receive_message_length": options.maxResponseBytes ?? MAX_RESPONSE_BYTES, ...reconnect,
      ...options.channelOptions });
  const defaultDeadlineMs = options.deadlineMs ?? 30_000;

  function rpc<Req, Res>(type: MessageType<Req>, method: (request: Req, metadata: Metadata,
    callOptions: { deadline: number }, callback: (err: ServiceError | null, response: Res) => void) => unknown): Rpc<Req, Res> {
    function attempt(request: Req, deadline: number): Promise<Res> {
      const metadata = new Metadata();
      if (options.token) metadata.set("authorization", `Bearer ${options.token}`);
      return new Promise((resolve, reject) => {
        method.call(stub, request, metadata, { deadline }, (err, response) => (err ? reject(err) : resolve(response)));
      });
    }
    return async (request, deadlineMs = defaultDeadlineMs) => {
      const message = type.fromPartial(request);
      const deadline = Date.now() + deadlineMs;
      for (let retry = 1; ; retry++) {
        try {
          return await attempt(message, deadline);
        } catch (err) {
          if (unsendable(err as ServiceError)) throw invalidRequest(err as ServiceError);
          const pause = backoffMs(policy, retry);
          if (!RETRYABLE.includes((err as ServiceError).code) || retry >= policy.attempts || Date.now() + pause >= deadline) {
            throw err;
          }
          await new Promise((resolve) => setTimeout(resolve, pause));
        }
      }
    };
  }

  return {
    measure: rpc(MeasureRequest, stub.measure),
    prune: rpc(PruneRequest, stub.prune),
    compact: rpc(CompactRequest, stub.compact),
    assemble: rpc(AssembleRequest, stub.assemble),
    truncateToolOutput: rpc(TruncateToolOutputRequest, stub.truncateToolOutput),
    readTruncated: rpc(ReadTruncatedRequest, stub.readTruncated),
    close: () => stub.close(),
  };
}
