"""Entry point: `streamlit run app/main.py` (`make run` serves it through app/frontends/streamlit/web.py). The app
itself lives in app/frontends/streamlit/; this script only runs it, since Streamlit re-executes its entry script on
every interaction."""

from app.frontends.streamlit.navigation import run

run()
