"""text wing."""
