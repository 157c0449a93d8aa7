"""Everything is in pyproject.toml except one file setuptools cannot declare: the lm-eval plugin's ``.pth``.

The line it holds runs at interpreter start and only installs an import hook (``harness/lmeval/plugin.py``), so that
lm-eval 0.4.13, which reads no model entry points, finds this package's models under plain ``lm_eval --model``.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PTH_NAME = "dllm_harness_lmeval.pth"
PTH_LINE = "import harness.lmeval.plugin; harness.lmeval.plugin.install()\n"


class BuildPyWithPluginPth(build_py):
    """Writes the ``.pth`` at the root of what becomes site-packages: the build folder of a wheel, or the unpacked
    editable wheel (``pip install -e``), whose packages stay in the source tree."""

    def run(self) -> None:
        super().run()
        root = self.get_finalized_command("install").install_lib if self.editable_mode else self.build_lib
        Path(root, PTH_NAME).write_text(PTH_LINE)


setup(cmdclass={"build_py": BuildPyWithPluginPth})
