"""OpenAI's Files and Vector stores endpoints over the app's knowledge collections."""
