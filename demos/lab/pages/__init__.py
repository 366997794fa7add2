"""What a person looks at, torch-free: the report, the index, the sweep and compare pages, plots, the drawing helper."""
