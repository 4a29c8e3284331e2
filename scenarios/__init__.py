"""Locust workloads against the broker: ``locust -f scenarios/<name>.py`` (web UI) or headless.

Scenario files (each a locustfile): ``throughput`` (fixed or maximum rate, with consumption), ``latency``
(fixed rate; send and send-to-consume latency through long polling), ``backlog`` (OpenMessaging Benchmark's
backlog test: build with consumers paused, drain while producing), ``queues`` (one rate over 1, 100, 1,000
and 10,000 queues). Each writes a run record (``runs/<run-id>/``, schema in ``harness.records``), checks it
(``harness.checker``) and prints a one-screen summary.

Shared modules: ``options`` (custom arguments), ``spec`` (what a scenario declares), ``runtime`` (locust
wiring), ``coordinator`` (environment, record, steering, end of run), ``agent`` (the load of one process),
``hub`` (coordinator <-> workers), ``pacing`` (open-loop schedule), ``contract`` (what they exchange),
``summary``; the drivers below them are in ``harness.driver``.
"""
