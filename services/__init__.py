"""passk processors, producer SDK and CLI."""
