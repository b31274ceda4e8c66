"""The app's pages: (file in pages/, title, URL path, icon). Keep the URL paths stable."""

PAGES = [
    ("explore.py", "Explore", "", ":material/search:"),
]
