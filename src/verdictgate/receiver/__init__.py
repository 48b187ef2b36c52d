"""`verdictgate serve`, its modules grouped by the path data takes through a receiver:

- `transport`: the gRPC and HTTP ports' services and routes, their token and failures;
- `ingest`: an export admitted, decoded and committed to the `store`;
- `core`: the `Receiver`, driving each run's lifecycle from what ingest commits to the finisher;
- `publishing`: a final run judged, its admission committed, delivered and shown for scraping;
- `queries`: the read side, the JSON API and the pages;
- `replication`: what replicas sharing a PostgreSQL store add;
- `store`: the durable store; `http`: the bounded HTTP/1.1 server of both HTTP ports.

`config` and `limits` are what a receiver is told, `server` runs both transports, `service`
assembles the whole; `run_faults` keeps one run's fault from stopping the others, and
`store_outage` tells a store outage in two log lines.

Internal: the public API is what `verdictgate` exports. Its modules may be imported (the tests
do), but they can change between releases.
"""
