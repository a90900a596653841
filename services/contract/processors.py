"""The processors `passk` runs, in one place below the CLI: the CLI, `passk supervise`,
`passk status` and the monitoring config all read these tuples."""

from __future__ import annotations

# Stream processors runnable with `passk worker NAME`; each has services/NAME/app.py.
WORKERS = ("gate", "verdict", "judge", "sink", "aggregate", "calibration")
# Workers that are not Faust stream processors (services/NAME/app.py has `app.main()` too):
# supervised by `make up` and scraped after WORKERS (/metrics on base + len(WORKERS) + i).
SERVERS = ("otlp",)
