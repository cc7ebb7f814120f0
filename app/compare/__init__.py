"""Compare: one conversation answered by several targets (backend, model, settings) at once, side by side.

targets.py      what a target is; the targets file and the two default targets
compare_run.py  every target's turn on its own thread, with its own Stop; events per target; run_all for headless use
results.py      a turn's answer, figures and tool-call checks, read off its events
prompt_set.py   the headless prompts file (JSONL)
report.py       the headless report (JSON and CSV)
ratings.py      the leaderboard from votes: Bradley-Terry with bootstrap intervals, Elo, wins and speed
export.py       votes and the leaderboard as JSON and CSV
cli.py          `python -m app.compare`

The targets' models are loaded, shared by the targets on one model, and freed in app/clients/pool.py, the one
pool every front end uses.

Votes are stored by app/storage/compare_votes.py. The Streamlit page is a front end over these: it draws the
events of each target's queue and saves votes through the store.
"""
