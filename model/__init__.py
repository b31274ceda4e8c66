"""attnlab model layer."""
