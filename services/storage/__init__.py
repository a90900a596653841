"""The SQL engine helper the processors' stores share (SQLite by default, PostgreSQL)."""
