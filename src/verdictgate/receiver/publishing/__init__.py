"""Publishing: a final run's admission judged, committed and sent on.

The finisher's threads (`finisher`) admit the runs the lifecycle made final (`admitting`), each
judged by its suite (`judging`); an admission is staged in the store's outbox and delivered
(`forwarder`, to an OTLP endpoint: `otlp_target`), and the latest of every (suite, point),
other replicas' included (`shown_admissions`), shown on the scrape port (`prometheus_endpoint`).
"""
