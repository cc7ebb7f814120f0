"""Knowledge: documents read into passages kept in the app's database, and searched for the passages that answer a
question, each with its source (file and page). UI-agnostic: the pages, the tools and the API use it."""
