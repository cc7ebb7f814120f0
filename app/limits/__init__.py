"""Bounds on whatever crosses into the app: JSON and schema size and depth, outside schemas' validation, HTTP
timeouts, and the network guard for URLs a model or a user names."""
