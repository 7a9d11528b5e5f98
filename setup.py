"""Package discovery plus the conf/ → lightning_cls/conf mapping (metadata is in pyproject)."""

from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["lightning_cls", "lightning_cls.*"]) + ["lightning_cls.conf"],
    package_dir={"lightning_cls.conf": "conf"},
)
