"""attnlab analysis layer."""
