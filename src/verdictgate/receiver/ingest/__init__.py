"""Ingest: an export request's path into the store, whichever transport brought it.

`exports` walks it (`Ingest`): admitted fairly (`fair_gate`), its body read (`otlp_http`, on
the HTTP port) and decoded (`decoding`, in worker processes that keep their freed memory:
`allocator`), committed together with the requests beside it (`commit_groups`), answered with
OTLP partial success. `span_warnings` tells what a write's framework spans call for, and
`settling` later derives the trials of held framework spans that went quiet.
"""
