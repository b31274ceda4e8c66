"""Sub-commands of `attnlab`."""
