"""`passk ci`: gate a pull request in one command (docs/ci.md)."""
