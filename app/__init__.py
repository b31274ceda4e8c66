"""attnlab app layer."""
