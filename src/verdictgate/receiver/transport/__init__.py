"""The transports: what ingest and the queries share at the gRPC and HTTP ports.

The gRPC services (`grpc_api`) behind their guards (`grpc_guards`), the HTTP port's router
(`http_api`) and its requests' answers (`http_exchange`), the bearer token both check
(`bearer`), and what a failure means for its sender (`failures`), each transport mapping it to
its own status.
"""
