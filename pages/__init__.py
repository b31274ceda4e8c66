"""The app's pages: one Streamlit script each (attnlab.app.navigation lists them)."""
