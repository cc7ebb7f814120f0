"""The model's status next to the model picker: whether it sees images, and how many answers (of every browser tab
and API request) it is writing now. Live: a fragment redraws it every few seconds while the page is idle, and the
streaming turn redraws it when its own answer starts and ends, so it never says "idle" under a streaming answer."""

from __future__ import annotations

from datetime import timedelta

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from app.clients.client_protocol import Client

_SLOT_KEY = "_model_status_slot"
_REFRESH = timedelta(seconds=3)
VISION_LABELS = {
    True: ":material/visibility: Sees images",
    False: ":material/visibility_off: Text only: cannot see images",
    None: ":material/help: Images: the server decides",
}
VISION_HELP = {
    True: "Attach pictures to ask about them.",
    False: "This model cannot see images (load a vision-language model, e.g. SmolVLM, to ask about pictures).",
    None: "Whether this model can see images is the API server's to say: pictures are sent as they are.",
}
ACTIVITY_HELP = ("Every browser tab and API request shares the one loaded model. The transformers backend writes up "
                 "to DEMO_HF_MAX_BATCH answers together (continuous batching), vLLM batches them itself.")


def render(client: Client | None) -> None:
    """Draw the status where it is called (the row of the model picker)."""
    if client is None:
        st.caption(":material/error: No model loaded")
        return
    _live(client)


@st.fragment(run_every=_REFRESH)
def _live(client: Client) -> None:
    slot = st.empty()
    st.session_state[_SLOT_KEY] = slot
    _draw(slot, client)


def refresh(client: Client) -> None:
    """Redraw the status now (from the running script: a turn that starts or ends)."""
    slot = st.session_state.get(_SLOT_KEY)
    if isinstance(slot, DeltaGenerator):
        _draw(slot, client)


def _draw(slot: DeltaGenerator, client: Client) -> None:
    vision = client.capabilities.vision
    activity = client.activity()
    parts, help_text = [VISION_LABELS[vision]], VISION_HELP[vision]
    if activity is not None:
        parts.append(":material/groups: " + activity.describe())
        help_text += "\n\n" + ACTIVITY_HELP
    slot.caption(" · ".join(parts), help=help_text)
