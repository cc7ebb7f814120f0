"""Previews of what an answer's code blocks draw (HTML pages, SVG pictures, Mermaid diagrams), each in a frame that
can run its scripts and reach nothing else: blocks.py finds them, route.py serves the frame's page, frame.py shows
it."""
