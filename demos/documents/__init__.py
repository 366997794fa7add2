"""The documents' own objects: the custom Functions, the models, the digits, the DDP wrapping."""
