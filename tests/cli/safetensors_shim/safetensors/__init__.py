"""A stand-in for the safetensors package (not in Debian 12) with the two calls the
snippet `runner export` prints uses: safe_open(path, "pt").metadata() and
safetensors.torch.load_file(path). Tests put this directory on PYTHONPATH; it reads
files with scripts/torchvision_model.py's standard-library reader."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "scripts"))
from torchvision_model import read_safetensors  # noqa: E402


class safe_open:  # noqa: N801 (the package's name)
    def __init__(self, path, framework):
        assert framework == "pt"
        self._meta = read_safetensors(path)[1]

    def metadata(self):
        return self._meta

    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False
