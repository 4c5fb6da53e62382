"""The package list, the one setting pyproject.toml cannot say: the packages found under tinylm/ and hydra_plugins/
(the resumable sweeper), and the repository's conf/ shipped as tinylm/conf (pyproject.toml's package-dir maps it;
tinylm.commands reads the configs there when tinylm is installed)."""

from setuptools import find_namespace_packages, setup

CONF = ["tinylm.conf", *(f"tinylm.conf.{group}" for group in find_namespace_packages(where="conf"))]

setup(packages=[*find_namespace_packages(include=["tinylm*", "hydra_plugins*"]), *CONF])
