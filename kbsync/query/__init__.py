"""query wing."""
