"""The torch-bound runner: context, entries, the run, device, torchrun and its followers, the
command line."""
