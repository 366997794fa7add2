"""autograd-demos: the classic PyTorch autograd examples as a lab you can run, see and check."""
__version__ = "0.1.0"
