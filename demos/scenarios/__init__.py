"""The scenarios: one file each (`<name>.py`, with `run(cfg, ctx)`), typed configs in `configs.py`."""
