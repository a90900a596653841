"""The `passk` command line (`services.cli.main`) and the operator commands under it:
status, topics, supervise, liveness. The top layer: nothing below imports it."""
