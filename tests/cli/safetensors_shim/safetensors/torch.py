"""safetensors.torch.load_file of the stand-in package (see __init__.py)."""
from safetensors import read_safetensors


def load_file(path):
    return read_safetensors(path)[0]
