"""All Tools page: the built-in tools plus a Python interpreter, a web browser, image generation (when
configured) and document upload, all private to this browser session."""

from __future__ import annotations

import streamlit as st

from app.agent.attachments import ATTACHMENT_TYPES
from app.frontends.streamlit import approvals, mcp_library, sidebar, state, tool_settings, voice_input, welcome
from app.frontends.streamlit.chat_page import answer_if_asked, show_model
from app.frontends.streamlit.client_cache import load_client
from app.frontends.streamlit.messages import render_history
from app.frontends.streamlit.safe_markdown import safe_markdown
from app.frontends.streamlit.session_tools import session_tools
from app.tools import load_tools
from app.tools.sandbox import isolation

PAGE = "all_tools"

settings = sidebar.current()
conversation = state.conversation(PAGE)
tools_of_session = session_tools()

st.title("All Tools")
client = load_client(settings.model)
tools = tool_settings.render(client, PAGE, load_tools().merged(tools_of_session.registry()))
python_unavailable = tools_of_session.python_unavailable
with sidebar.page_section():
    sees = client is not None and client.capabilities.vision is not False
    tool_images = st.toggle(
        "Show plots to the model", key=f"{tool_settings.KEPT_PREFIX}{PAGE}.tool_images", disabled=not sees,
        help="Give the pictures the tools make (plots, generated images) back to the model after their results, "
             "so it can look at its own chart. Needs a model that can see images; each picture costs prompt tokens.")
    if not python_unavailable and st.button(
            "Restart Python kernel", key="restart_kernel", width="stretch",
            help="A fresh kernel: variables and the files it wrote are lost; uploaded files stay."):
        with st.spinner("Restarting the kernel..."):
            tools_of_session.kernel.restart()
        st.toast("The Python kernel was restarted.", icon=":material/restart_alt:")
show_model(client)
if python_unavailable:
    st.warning(safe_markdown(f"The Python tool is off. {python_unavailable}"), icon=":material/shield:")
with st.expander("What the tools can do, and what the Python sandbox does and does not promise"):
    limits = tools_of_session.kernel.limits
    isolated = limits.isolation != "none"
    st.markdown(
        f"""
- **python** runs code in a Jupyter kernel that belongs to this browser tab only, isolated by
  {isolation.describe(limits)}. Limits: memory ({limits.memory_mb} MB a process), CPU time ({limits.cpu_s} s),
  {limits.processes} processes, files ({limits.file_mb} MB each, {limits.disk_mb} MB in all), output
  ({limits.output_chars:,} characters a cell); each cell stops after {limits.cell_timeout_s:g} s. Uploaded files
  are in its folder, read-only. The kernel and everything it started end when the tab closes or after
  {limits.idle_shutdown_s / 60:g} idle minutes.
- {"Code cannot see the app's files, its settings or other sessions, reach the app's ports or the network, or "
   "signal the app's processes." if isolated else
   "**Not isolated**: code can read files the app's user can read and can use the network. Do not run this demo "
   "where the model (or whoever talks to it) must not touch the machine."}
- **web_search**, **open_url** and **mclick** read the web; sources are numbered and cited as links. Local and
  private addresses are refused unless allowed with `DEMO_BROWSER_ALLOW`.
- **generate_image** is {"available" if tools_of_session.image_api else
  "off: set `DEMO_IMAGE_API_URL`, `DEMO_IMAGE_API_KEY` and `DEMO_IMAGE_MODEL` (CogView or any OpenAI-compatible "
  "images API) to turn it on"}.
- Attach PDF, Word, PowerPoint or text files (CSV, JSON, code...) to a message: their text goes to the model and
  the files to the Python folder. Attach pictures (PNG, JPEG, WebP, GIF) to ask a vision model about them;
  with **Show plots to the model** on, it also sees the charts its code draws.
"""
    )

# Pinned to the bottom wherever it is called: called first, so that the welcome knows whether a message came.
# Open while an answer is written, as on the Chat page (views/chat.py says why).
box = approvals.message_box(welcome.PLACEHOLDERS[PAGE], conversation)
submitted = st.chat_input(voice_input.placeholder(box.placeholder), disabled=box.disabled, key="all_tools_input",
                          accept_file="multiple", file_type=ATTACHMENT_TYPES, accept_audio=True)
submitted = voice_input.take(PAGE, submitted)  # a recording becomes a draft to correct (views/chat.py)
submitted = mcp_library.render(PAGE, "all_tools_input", submitted)  # servers' prompts and resources
conversation_box = render_history(PAGE, conversation, tools_of_session.browser.link_citations, tools)
with conversation_box:  # the new message and the answer go on in it
    voice_input.render_draft(PAGE, disabled=box.disabled)
    welcome.render(PAGE, conversation, tools, submitted=submitted)
    answer_if_asked(PAGE, submitted, conversation, client, settings, tools,
                    on_upload=tools_of_session.save_upload, transform=tools_of_session.browser.link_citations,
                    tool_images=tool_images and sees)
