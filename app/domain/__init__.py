"""The values every layer shares, with no engine, page or database in them: conversations and messages, generation
parameters, media (images) and what a user attaches to a message."""
