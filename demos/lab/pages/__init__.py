"""What a person looks at, torch-free: the report and the index (templates/ and static/,
rendered by templating.py), plots, the drawing helper."""
