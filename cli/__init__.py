"""The `attnlab` command line: tooling on top of every layer (model, analysis, app); nothing imports it."""
