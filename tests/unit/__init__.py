"""Logic through real components, no server process and no browser: conversations, dialects, parsers, tools,
storage, Compare's runner, the layout."""
