"""The app's pages: (file in pages/, title, URL path, icon). Keep the URL paths stable."""

PAGES = [
    ("explore.py", "Explore", "", ":material/search:"),
    ("heatmaps.py", "Heatmaps", "heatmaps", ":material/grid_on:"),
    ("masks.py", "Masks", "masks", ":material/filter_alt:"),
    ("scores.py", "Score scales", "scores", ":material/equalizer:"),
    ("rollout.py", "Rollout & attribution", "rollout", ":material/account_tree:"),
    ("heads.py", "Heads", "heads", ":material/psychology:"),
    # part 2: mechanics
    ("kv_cache.py", "KV cache", "kv-cache", ":material/memory:"),
    ("backends.py", "Backends", "backends", ":material/speed:"),
    ("step_by_step.py", "Step by step", "step-by-step", ":material/calculate:"),
    ("cross_attention.py", "Cross-attention", "cross-attention", ":material/translate:"),
    ("positions.py", "Positions", "positions", ":material/pin_drop:"),
    ("generate.py", "Generate", "generate", ":material/edit_note:"),
    # issue #8: up to 4,096 tokens, a pooled overview and exact windows
    ("long_input.py", "Long inputs", "long-inputs", ":material/straighten:"),
]
