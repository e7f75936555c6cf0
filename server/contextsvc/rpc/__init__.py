"""The gRPC face of the service: the servicer, protobuf conversion, the asyncio call handlers, admission,
health and reflection, TLS and the bearer token. Nothing outside this package (but the process
entry points) imports grpc or the generated stubs."""
