"""The bottom layer, torch-free: config and its schema, safe YAML, results, the tolerance model,
the run folder, files, signals, console."""
