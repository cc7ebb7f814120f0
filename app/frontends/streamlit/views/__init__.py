"""The pages st.navigation runs: Chat, Tools, All Tools and Compare (one script each)."""
