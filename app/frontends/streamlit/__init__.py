"""The Streamlit front end: navigation (the script app/main.py runs), the pages in views/, the sidebar, the chat
rendering and per-session state. It renders the agent's events and holds session state, nothing more."""
