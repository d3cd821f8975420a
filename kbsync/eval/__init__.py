"""eval wing."""
