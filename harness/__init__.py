"""The harness core: run records (``harness.records``), the Jepsen-style loss checker (``harness.checker``) and
the embedded topology of real broker processes (``harness.launcher``).

Scenarios and chaos experiments write ``runs/<run-id>/`` through :mod:`harness.records`; the checker and the
Spark reports read them back. Nothing here imports the broker: run records do not assume who produced them.
"""
