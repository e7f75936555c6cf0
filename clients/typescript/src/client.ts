// ContextService client for TypeScript: the @grpc/grpc-js stub ts-proto generates from the
// repository's proto (npm run build), with every RPC as a promise that takes a partial request.
import { ChannelCredentials, ChannelOptions, Metadata, credentials as grpcCredentials } from "@grpc/grpc-js";
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

export function connect(address: string, options: ConnectOptions = {}): ContextService {
  const stub = new ContextServiceClient(address, options.credentials ?? grpcCredentials.createInsecure(),
    options.channelOptions);
  const defaultDeadlineMs = options.deadlineMs ?? 30_000;

  function rpc<Req, Res>(type: MessageType<Req>, method: (request: Req, metadata: Metadata,
    callOptions: { deadline: number }, callback: (err: Error | null, response: Res) => void) => unknown): Rpc<Req, Res> {
    return (request, deadlineMs = defaultDeadlineMs) => {
      const metadata = new Metadata();
      if (options.token) metadata.set("authorization", `Bearer ${options.token}`);
      return new Promise((resolve, reject) => {
        method.call(stub, type.fromPartial(request), metadata, { deadline: Date.now() + deadlineMs },
          (err, response) => (err ? reject(err) : resolve(response)));
      });
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
