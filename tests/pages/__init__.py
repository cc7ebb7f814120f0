"""The Streamlit pages through Streamlit's AppTest, on tiny models and SmolLM2."""
