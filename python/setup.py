"""Builds the cohort package: its protocol modules are generated from ../proto first."""
import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildWithProtos(build_py):
    def run(self):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import gen_protos

        gen_protos.generate()
        super().run()


setup(cmdclass={"build_py": BuildWithProtos})
