"""What every part of passk agrees on, with no behaviour of its own: settings, topic names
and configs, the processor registry (each processor's topics, tables and metrics port), the
codec, the dead-letter record, event-time bounds, masking, exit codes, the files `make up`
leaves behind. Imports only
`schemas` (the event and scenario models live there)."""
