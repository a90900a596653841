"""The Faust runtime: the only code outside the processors' `app` modules that imports
faust. App factory, keyed-join kit (ticks, flow, graded, outbox), outage accounting,
metrics, re-grade routing, and the Faust compatibility layer (faust_compat)."""
