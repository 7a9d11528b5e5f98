"""``--help`` in a third of the time: Hydra's help text, without its per-group repository copies.

Hydra's ``--help`` lists the config groups through ``ConfigLoaderImpl.get_group_options``, once
per group and kind (about 60 calls per listing, and the help holds two listings), and each call
deep-copies the whole config repository (``CachingConfigRepository.__init__``) so that it may add
search paths without touching the original. With ``train``'s config that was two thirds of
``python -m lightning_cls.train --help`` (cProfile: 8.5 of 12.5 s in ``copy.deepcopy`` under
the profiler; docs/benchmarks.md, "Start-up").

``share_group_repository`` makes the calls that add nothing (no overrides, no primary config:
the ones the help makes) share one copy, made once per loader; every other call runs Hydra's own
code. The copy is the one Hydra would make, and nothing changes it during a help run, so the text
is Hydra's, byte for byte (``tests/cli/test_hydra_help.py`` compares it with Hydra's own, with and
without overrides). Hydra offers no public hook for this, so ``run_cli`` installs it only for
``--help``/``-h``/``--hydra-help``; it relies on hydra-core 1.3's ``ConfigLoaderImpl``
(pyproject.toml pins ``hydra-core>=1.3,<1.4``).
"""

from __future__ import annotations

from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra.core.object_type import ObjectType

_SHARED = "_lightning_cls_group_repository"


def share_group_repository() -> None:
    """From now on, ``get_group_options`` calls without overrides share one caching repository."""
    hydra_own = ConfigLoaderImpl.get_group_options
    if getattr(hydra_own, "shares_repository", False):
        return

    def get_group_options(
        self: ConfigLoaderImpl,
        group_name: str,
        results_filter: ObjectType | None = ObjectType.CONFIG,
        config_name: str | None = None,
        overrides: list[str] | None = None,
    ) -> list[str]:
        if config_name is not None or overrides:
            return hydra_own(self, group_name, results_filter, config_name, overrides)
        repository = self.__dict__.get(_SHARED)
        if repository is None:
            _, repository = self._parse_overrides_and_create_caching_repo(None, [])
            self.__dict__[_SHARED] = repository
        return repository.get_group_options(group_name, results_filter)

    get_group_options.shares_repository = True
    ConfigLoaderImpl.get_group_options = get_group_options
