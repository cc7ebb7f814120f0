"""The blind vote under the panes, the leaderboard with its downloads, and the thumbs answers got in conversations.

A vote compares the last turn's answers: with two panes, A better / B better / tie / both bad, one stored vote;
with three or four, the best one (each pair it won stored as a win) or "tie" / "all bad" (each pair stored so). It
is stored with the targets (label and model settings, never an API key), the prompt, the answers and their figures
(app/storage/compare_votes.py), in the app's database under the signed-in user (the local user, without sign-in).
The leaderboard (app/compare/ratings.py) is drawn from them."""

from __future__ import annotations

import itertools
import logging
from typing import Any

import streamlit as st

from app.compare import export
from app.compare.ratings import leaderboard
from app.frontends.streamlit import persistence
from app.frontends.streamlit.compare_panes.compare_session import CompareSession, Pane
from app.frontends.streamlit.safe_markdown import safe_label, safe_markdown
from app.storage import CompareVoteStore, StorageError
from app.storage.compare_votes import Verdict
from app.storage.feedback import FeedbackStore

log = logging.getLogger(__name__)
_NOTICE = "_compare_vote_notice"


def _store() -> CompareVoteStore:
    return CompareVoteStore(persistence.store().engine)


def can_vote(session: CompareSession) -> bool:
    """A finished turn with two or more answers, not voted on yet."""
    return (len(session.panes) >= 2 and session.comparison is not None and not session.running
            and session.voted is None and all(pane.result is not None for pane in session.panes))


def render_vote(session: CompareSession) -> None:
    """The vote's buttons (or, after it, what was voted and who was who)."""
    notice = st.session_state.pop(_NOTICE, None)
    if notice:
        st.success(safe_markdown(notice), icon=":material/how_to_vote:")
    if not can_vote(session):
        return
    letters = [session.letter(index) for index in session.order]
    st.markdown("**Which answer is better?**" + (" The targets are shown once you vote." if session.blind else ""))
    choices: list[tuple[str, str]] = [(f"{letter} is better", letter) for letter in letters]
    choices += [("Tie", "tie"), ("Both bad" if len(letters) == 2 else "All bad", "both_bad")]
    columns = st.columns(len(choices))
    for column, (text, choice) in zip(columns, choices, strict=True):
        column.button(text, key=f"compare_vote/{choice}", on_click=vote, args=(session, choice), width="stretch")


def vote(session: CompareSession, choice: str) -> None:
    """Store the vote (as pairwise votes) and reveal the targets."""
    who = persistence.owner()
    if who is None:
        st.session_state[_NOTICE] = "Sign in to vote: votes are kept per user."
        return
    by_letter = {session.letter(index): session.panes[index] for index in session.order}
    shown = [by_letter[letter] for letter in sorted(by_letter)]
    pairs: list[tuple[Pane, Pane, Verdict]] = []
    if choice in ("tie", "both_bad"):
        verdict: Verdict = "tie" if choice == "tie" else "both_bad"
        pairs = [(a, b, verdict) for a, b in itertools.combinations(shown, 2)]
    else:
        winner = by_letter[choice]
        pairs = [(winner, other, "a") for other in shown if other is not winner]
    try:
        store = _store()
        for a, b, verdict in pairs:
            store.save(who, [_target(a), _target(b)], session.prompt, [_answer(a), _answer(b)], verdict,
                       [_metrics(a), _metrics(b)])
    except (StorageError, ValueError) as exc:
        log.warning("A vote could not be stored", exc_info=True)
        st.session_state[_NOTICE] = f"The vote could not be stored ({exc}); vote again when the database is back."
        return
    session.voted = choice
    if choice in ("tie", "both_bad"):
        said = "a tie" if choice == "tie" else "all bad"
    else:
        said = f"{choice} better"
    names = ", ".join(f"{session.letter(index)} was {session.panes[index].target.label}" for index in session.order)
    st.session_state[_NOTICE] = safe_label(f"Vote stored: {said}. {names}.")


def _target(pane: Pane) -> dict[str, Any]:
    return {"label": pane.target.label, "settings": pane.target.describe()}


def _answer(pane: Pane) -> str:
    result = pane.result
    if result is None:
        return ""
    return result.answer or (f"(error: {result.error})" if result.error else "")


def _metrics(pane: Pane) -> dict[str, Any]:
    return pane.result.metrics.to_json() if pane.result is not None else {}


def render_leaderboard(labels: list[str]) -> None:
    """The leaderboard from this user's votes, and the votes and the leaderboard to download."""
    who = persistence.owner()
    if who is None:
        st.caption("Sign in to keep votes and see a leaderboard.")
        return
    try:
        store = _store()
        outcomes = store.outcomes(who)
        votes = store.list(who, limit=1000) if outcomes else []
    except (StorageError, ValueError) as exc:
        st.warning(safe_markdown(f"The votes could not be read: {exc}"), icon=":material/cloud_off:")
        return
    if not outcomes:
        st.caption("No votes yet: send a message, then vote under the answers.")
        return
    standings = leaderboard(outcomes, labels)
    rows = [{"rank": rank, "target": s.label, "rating": round(s.rating), "95% interval":
             f"{s.ci_low:.0f} – {s.ci_high:.0f}", "elo": round(s.elo), "games": s.games, "wins": s.wins,
             "losses": s.losses, "ties": s.ties, "both bad": s.both_bad,
             "median TTFT (ms)": None if s.median_ttft_s is None else round(s.median_ttft_s * 1000),
             "median tok/s": None if s.median_tokens_per_second is None else round(s.median_tokens_per_second, 1)}
            for rank, s in enumerate(standings, start=1)]
    st.dataframe(rows, hide_index=True, width="stretch")
    counted = f"{len(outcomes)} vote" + ("" if len(outcomes) == 1 else "s")
    st.caption(f"{counted}. Rating: Bradley–Terry on Elo's scale (400 points: ten times the odds), with a 95% "
               "bootstrap interval; Elo in vote order beside it.")
    columns = st.columns(4)
    columns[0].download_button("Leaderboard CSV", export.leaderboard_csv(standings), "leaderboard.csv", "text/csv",
                               key="compare_download_leaderboard_csv", icon=":material/download:")
    columns[1].download_button("Leaderboard JSON", export.leaderboard_json(standings), "leaderboard.json",
                               "application/json", key="compare_download_leaderboard_json",
                               icon=":material/download:")
    columns[2].download_button("Votes CSV", export.votes_csv(votes), "votes.csv", "text/csv",
                               key="compare_download_votes_csv", icon=":material/download:")
    columns[3].download_button("Votes JSON", export.votes_json(votes), "votes.json", "application/json",
                               key="compare_download_votes_json", icon=":material/download:")


def render_thumbs() -> None:
    """The thumbs up and down this user gave answers in Chat, Tools and All Tools, per model that wrote them."""
    who = persistence.owner()
    if who is None:
        return
    try:
        counts = persistence.store_of(FeedbackStore).counts(who)
    except StorageError as exc:
        st.warning(safe_markdown(f"The feedback could not be read: {exc}"), icon=":material/cloud_off:")
        return
    st.markdown("**Thumbs on answers**, per model")
    if not counts:
        st.caption("No answer rated yet: the thumbs under an answer in Chat, Tools or All Tools count here.")
        return
    st.dataframe([{"model": count.model, "rated": count.rated, "👍": count.up, "👎": count.down,
                   "% up": round(100 * count.share_up), "with a comment": count.comments} for count in counts],
                 hide_index=True, width="stretch")
