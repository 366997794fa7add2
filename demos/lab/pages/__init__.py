"""What a person looks at, torch-free: the report, the index, the sweep and compare pages
(templates/ and static/, rendered by templating.py), plots, the drawing helper."""
