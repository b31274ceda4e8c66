"""The app's pages: (file in pages/, title, URL path, icon). Keep the URL paths stable."""

PAGES = [
    ("explore.py", "Explore", "", ":material/search:"),
    ("heatmaps.py", "Heatmaps", "heatmaps", ":material/grid_on:"),
    ("masks.py", "Masks", "masks", ":material/filter_alt:"),
    ("scores.py", "Score scales", "scores", ":material/equalizer:"),
    ("rollout.py", "Rollout & attribution", "rollout", ":material/account_tree:"),
    ("heads.py", "Heads", "heads", ":material/psychology:"),
]
