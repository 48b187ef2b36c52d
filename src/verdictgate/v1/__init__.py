"""Generated protobuf and gRPC code for proto/verdictgate/v1 (do not edit; `make proto`)."""
