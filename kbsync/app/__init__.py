"""app wing."""
