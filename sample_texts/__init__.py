"""Sample texts and measured presets (JSON) that the app and the lecture models read."""
