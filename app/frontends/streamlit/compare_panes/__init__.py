"""The Compare page's parts (the page itself: app/frontends/streamlit/views/compare.py), over the core in
app/compare/.

target_editor.py    the sidebar's targets: 2 to 4, each a backend, model, sampling, system prompt and tool choice
pane_models.py      the loaded models, in the process's one pool: the picker's shared with the other pages, the
                    other targets' beside it; memory checked before loading, shown and freed in the sidebar
compare_session.py  this browser session's comparison: the panes' conversations, the running turn, the blind order
panes.py            the panes side by side: history, the live answer, Stop, approvals, figures, the tool-call strip
votes.py            the blind vote, the leaderboard and the downloads
handoff.py          "Continue in Chat": a pane's conversation saved and opened on the Chat or Tools page
"""
