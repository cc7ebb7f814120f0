"""Compare page: one message to two to four targets (backend, model, settings) at once, their answers side by side
as they stream, each with its own Stop and figures; tool calls checked per target; a blind vote into a leaderboard;
any pane's conversation taken on in Chat."""

from __future__ import annotations

import streamlit as st

from app.agent.attachments import ATTACHMENT_TYPES
from app.agent.loop import Decision, ToolSettings
from app.clients.pool import model_identity
from app.compare.compare_run import start_comparison
from app.compare.targets import TargetsError
from app.domain.conversation import Conversation, Message
from app.domain.media import ImageError
from app.frontends.streamlit import knowledge_chat, knowledge_page, model_status, sidebar, tool_settings
from app.frontends.streamlit.chat_page import user_message
from app.frontends.streamlit.client_cache import load_client
from app.frontends.streamlit.compare_panes import compare_session as session
from app.frontends.streamlit.compare_panes import handoff, panes, votes
from app.frontends.streamlit.compare_panes import pane_models as models
from app.frontends.streamlit.compare_panes import target_editor as targets
from app.frontends.streamlit.safe_markdown import safe_markdown
from app.prompting.chat_format import ImagePolicy

PAGE = "compare"
_NOTICE = "_compare_notice"
_DECIDED = "_compare_decided"  # a pane's Run or Deny, clicked: (pane index, decisions)

handoff.switch_if_asked()  # a pane's "Continue" was clicked: its conversation opens on its page
side = sidebar.current()
compare = session.current()
busy = compare.running or _DECIDED in st.session_state  # a turn runs, or a Run/Deny resumes one below

st.title("Compare")
st.caption("One message to every target at once: their answers stream side by side, each with its own Stop and "
           "figures. Vote for the better one to build the leaderboard; continue with any of them in Chat.")

with sidebar.page_section():
    st.subheader("Compare")
    st.session_state.setdefault("settings.compare.blind", True)
    st.session_state.setdefault("settings.compare.tools", False)
    blind = st.toggle("Blind vote", key="settings.compare.blind", disabled=busy,
                      help="Panes are labelled A, B... in a random order until you vote; then they say who is who.")
    use_tools = st.toggle("Tools", key="settings.compare.tools", disabled=busy,
                          help="Every target may call the tools switched on below, each running its own tool loop.")
    st.caption("Each target has its own sampling and system prompt below; the Generation settings above are the "
               "other pages'.")
    knowledge_page.choose_in_sidebar(
        compare.panes[0].conversation if compare.panes else Conversation(), knowledge_page.COMPARE_CHOSEN, busy,
        help="Each question from now on is searched once in these collections, and every target answers from the "
             "same passages, shown under the question in each pane. Manage them on the Knowledge page.")
tools: ToolSettings | None = tool_settings.render(None, PAGE) if use_tools else None
with sidebar.page_section():
    st.markdown("**Targets**")
    chosen, problem = targets.render(side.model, tools.registry.names if tools is not None else [], busy)
if not busy and problem is None:  # a target being fixed leaves the panes as they are
    compare.match(chosen)

shared = load_client(side.model) if any(model_identity(t.settings) == model_identity(side.model) for t in chosen) \
    else None
with sidebar.status_section():
    model_status.render(shared)
engines = models.ModelsFor(side.model, shared)
with sidebar.page_section():
    models.render_loaded(engines, busy=busy)

images = ImagePolicy(see=True)


def _with_passages(message: Message) -> None:
    """Search once for the question, before the panes get their copies of it: every target answers from the same
    passages (those of the collections chosen above, and of long documents attached in this comparison)."""
    asked = Conversation([*(compare.panes[0].conversation.messages if compare.panes else []), message])
    problems = [knowledge_page.attach_chosen(asked, knowledge_page.COMPARE_CHOSEN),
                knowledge_chat.passages_for_turn(asked)]
    if said := " ".join(filter(None, problems)):
        st.session_state[_NOTICE] = said  # shown above the panes once the turn is drawn


def _stop(index: int) -> None:
    if compare.comparison is not None:
        compare.comparison.stop(index)


def _decide(index: int, decisions: dict[str, Decision]) -> None:
    # Taken below, once this run has read the tool settings: a decision is checked against the policies as they
    # are at the click (a tool set to Never since the turn began is refused), never against the turn's old ones.
    st.session_state[_DECIDED] = (index, decisions)


if (decided := st.session_state.pop(_DECIDED, None)) is not None and compare.comparison is not None:
    try:
        compare.comparison.resume(decided[0], decided[1], engines, tools, images)
    except ValueError as exc:
        st.session_state[_NOTICE] = f"Nothing ran: {exc}."
        st.rerun()  # drawn again with the sidebar enabled (it was drawn busy above, for the resume)
    else:
        compare.resumed(decided[0])


submitted = st.chat_input("Send to every target...", key="compare_input", accept_file="multiple",
                          file_type=ATTACHMENT_TYPES,
                          disabled=compare.running or problem is not None)
if problem is not None:
    st.warning(safe_markdown(f"**Targets not ready.** {problem}"), icon=":material/warning:")
if (notice := st.session_state.pop(_NOTICE, None)) is not None:
    st.warning(safe_markdown(notice), icon=":material/warning:")

if submitted is not None and not compare.running and problem is None:
    try:
        message = user_message(submitted)
    except ImageError as exc:
        message = None
        st.error(safe_markdown(f"**Not sent.** {exc}"), icon=":material/hide_image:")
    too_big = models.check_memory(chosen, engines) if message is not None else None
    if too_big is not None:
        st.error(safe_markdown(f"**Not sent: a model would not fit.** {too_big}"), icon=":material/memory:")
    elif message is not None:
        _with_passages(message)
        try:
            conversations = compare.start_turn(message, blind)
            compare.comparison = start_comparison(chosen, conversations, engines, tools, images)
        except (TargetsError, ValueError) as exc:
            compare.abandon_turn()
            st.error(safe_markdown(f"**Not sent.** {exc}"), icon=":material/error:")

revealed = not compare.blind or compare.voted is not None
slots = panes.draw(compare, revealed, _stop, _decide, handoff.continue_with)
if compare.running:
    panes.stream(compare, slots)
    compare.collect()
    st.rerun()

votes.render_vote(compare)
panes.tool_strip(compare, revealed)
if any(pane.conversation.messages for pane in compare.panes):
    st.button("New comparison", icon=":material/add_comment:", key="compare_new", on_click=compare.clear,
              help="Empty the panes (votes stay in the leaderboard).")
with st.expander("Leaderboard", icon=":material/leaderboard:"):
    votes.render_leaderboard([target.label for target in chosen])
    votes.render_thumbs()
