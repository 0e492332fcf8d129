"""Builds cdcnorm: ``pyproject.toml`` holds the metadata, this file the compiled modules.

The modules of ``transforms.compiled.MODULES`` are compiled with mypyc where mypy and a C compiler
are at hand, unless ``CDCNORM_COMPILE=0``; elsewhere the package is pure Python (the same sources,
interpreted). ``CDCNORM_COMPILE=1`` makes a build that cannot compile fail instead (CI and the
worker image set it). ``make``, CI and the images build with mypy from a lock file
(``pip install --no-build-isolation``); a plain ``pip install .`` builds in an isolated environment
without mypy, so pure Python.

Next to the extension modules the build writes ``transforms/compiled.json``, the digest of each
compiled source, by which ``transforms.compiled`` tells a stale build from a current one.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import shlex
import shutil
import sys
import sysconfig
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
COMPILED = ROOT / "transforms" / "compiled.py"
COMPILE_ENV = "CDCNORM_COMPILE"


def compiled_modules() -> tuple[str, ...]:
    """``transforms.compiled.MODULES``, read from its source (the package is not importable here)."""
    for node in ast.parse(COMPILED.read_text()).body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "MODULES":
            assert node.value is not None
            modules: tuple[str, ...] = ast.literal_eval(node.value)
            return modules
    raise SystemExit(f"setup.py: no MODULES in {COMPILED}")


def source(module: str) -> Path:
    return ROOT.joinpath(*module.split(".")).with_suffix(".py")


def why_not_compiled() -> str | None:
    """Why the modules cannot be compiled here, or ``None`` when they can."""
    if os.environ.get(COMPILE_ENV) == "0":
        return f"{COMPILE_ENV}=0"
    try:
        import mypyc.build  # noqa: F401
    except ImportError:
        return "mypy (mypyc) is not installed in the build environment"
    compiler = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")[:1]
    if not compiler or shutil.which(compiler[0]) is None:
        return f"no C compiler ({' '.join(compiler) or 'CC'} not found)"
    if not Path(sysconfig.get_paths()["include"], "Python.h").is_file():
        return "no Python headers (Python.h)"
    return None


class BuildExt(build_ext):
    """``build_ext``, then ``transforms/compiled.json`` beside the extension modules it built."""

    def run(self) -> None:
        super().run()
        if not self.extensions:
            return
        modules = compiled_modules()
        record = {"modules": {m: hashlib.sha256(source(m).read_bytes()).hexdigest() for m in modules}}
        package = ROOT / "transforms" if self.inplace else Path(self.build_lib) / "transforms"
        package.mkdir(parents=True, exist_ok=True)
        (package / "compiled.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")


def extensions() -> list[object]:
    reason = why_not_compiled()
    if reason is not None:
        if os.environ.get(COMPILE_ENV) == "1":
            raise SystemExit(f"setup.py: {COMPILE_ENV}=1 but the modules cannot be compiled: {reason}")
        print(f"cdcnorm: building without compiled modules ({reason}); they run interpreted", file=sys.stderr)
        return []
    from mypyc.build import mypycify

    os.chdir(ROOT)  # mypycify takes paths relative to the project and reads its [tool.mypy]
    paths = [str(source(m).relative_to(ROOT)) for m in compiled_modules()]
    return list(mypycify(paths, opt_level="3", group_name="cdcnorm"))


setup(ext_modules=extensions(), cmdclass={"build_ext": BuildExt})
