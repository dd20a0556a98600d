"""In-tree PEP 517 backend: setuptools, plus max-core when a GPU vendor is requested.

`MOJOLEARN_VENDORS=cpu,cuda pip install .` needs max-core==26.7.0 in the build
environment to cross-compile GPU code; a CPU-only build never downloads it.
"""

import os

from setuptools import build_meta as _orig
from setuptools.build_meta import *  # noqa: F401,F403  (the PEP 517 hooks)

_GPU_VENDORS = {"cuda", "hip"}


def _extra():
    vendors = {v.strip().lower() for v in os.environ.get("MOJOLEARN_VENDORS", "").split(",")}
    return ["max-core==26.7.0"] if vendors & _GPU_VENDORS else []


def get_requires_for_build_wheel(config_settings=None):
    return _orig.get_requires_for_build_wheel(config_settings) + _extra()


def get_requires_for_build_editable(config_settings=None):
    return _orig.get_requires_for_build_editable(config_settings) + _extra()
