"""Generated protobuf message classes for proto/verdictgate/v1 (do not edit; `make proto`)."""
