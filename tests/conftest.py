"""Session-wide test setup.

Importing locust monkey-patches the whole process with gevent (threads become greenlets), and the scenario
tests import locust modules at collection. In this process that would turn every other test's threads —
the servers' event-loop threads among them — into greenlets on the main thread. So locust is imported here
first without the patch (LOCUST_SKIP_MONKEY_PATCH, read only at its import), and the variable is removed
again so the locust processes the scenario tests start are patched as usual.
"""

from __future__ import annotations

import os

os.environ["LOCUST_SKIP_MONKEY_PATCH"] = "1"
try:
    import locust  # noqa: F401
finally:
    del os.environ["LOCUST_SKIP_MONKEY_PATCH"]
