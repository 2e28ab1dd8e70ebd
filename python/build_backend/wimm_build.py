"""PEP 517 backend of the wimm Python package.

With setuptools and wheel importable (``pip install --no-build-isolation``
with Debian's python3-setuptools and python3-wheel, ``python3 -m build -n``)
it is setuptools' own backend.
In pip's default isolated build environment setuptools would have to be
downloaded, and machines without a package index cannot; there the package,
which is pure Python, is put into a wheel with the standard library alone.
Metadata comes from pyproject.toml's [project] table either way.
"""

import ast
import base64
import hashlib
import os
import re
import zipfile

try:
    import tomllib  # Python 3.11+
except ImportError:
    tomllib = None

try:
    import wheel  # noqa: F401 (setuptools builds wheels only with it)
    from setuptools import build_meta as _setuptools
except ImportError:
    _setuptools = None

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _project():
    path = os.path.join(ROOT, "pyproject.toml")
    if tomllib:
        with open(path, "rb") as f:
            return tomllib.load(f)["project"]
    # Before 3.11: the [project] table of our own pyproject.toml holds only
    # `key = "string"` and `key = [strings]` lines, which Python literals read.
    with open(path, encoding="utf-8") as f:
        table = f.read().split("[project]", 1)[1].split("\n[", 1)[0]
    return {k: ast.literal_eval(v) for k, v in re.findall(r"^([\w-]+) = (.+)$", table, re.M)}


def _metadata(p):
    lines = ["Metadata-Version: 2.1", f"Name: {p['name']}", f"Version: {p['version']}",
             f"Summary: {p['description']}", f"Requires-Python: {p['requires-python']}"]
    lines += [f"Classifier: {c}" for c in p.get("classifiers", [])]
    with open(os.path.join(ROOT, p["readme"]), encoding="utf-8") as f:
        readme = f.read()
    return "\n".join(lines + ["Description-Content-Type: text/markdown", "", readme])


def _digest(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(
        b"=").decode()


def _build(wheel_directory):
    p = _project()
    dist = f"{p['name']}-{p['version']}"
    files = {}
    pkg = os.path.join(ROOT, "wimm")
    for name in sorted(os.listdir(pkg)):
        if name.endswith(".py"):
            with open(os.path.join(pkg, name), "rb") as f:
                files[f"wimm/{name}"] = f.read()
    info = f"{dist}.dist-info"
    files[f"{info}/METADATA"] = _metadata(p).encode()
    files[f"{info}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: wimm_build\n"
                              b"Root-Is-Purelib: true\nTag: py3-none-any\n")
    files[f"{info}/top_level.txt"] = b"wimm\n"
    record = [f"{path},{_digest(data)},{len(data)}" for path, data in files.items()]
    files[f"{info}/RECORD"] = ("\n".join(record + [f"{info}/RECORD,,"]) + "\n").encode()
    wheel = f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel), "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files.items():
            z.writestr(path, data)
    return wheel


def get_requires_for_build_wheel(config_settings=None):
    return _setuptools.get_requires_for_build_wheel(config_settings) if _setuptools else []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    if _setuptools:
        return _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)
    return _build(wheel_directory)


def build_sdist(sdist_directory, config_settings=None):
    if not _setuptools:
        raise RuntimeError("building an sdist needs setuptools (python3-setuptools)")
    return _setuptools.build_sdist(sdist_directory, config_settings)
