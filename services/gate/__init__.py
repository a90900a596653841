"""Gate processor: the exit gate and the state gate, joined by session_id."""
