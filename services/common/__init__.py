"""The small core every processor shares: settings, topics, codec, app factory."""
