"""Every hparams_search config names keys that exist in the config it is documented with: a
search over a missing key fails only when the sweep starts."""

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from lightning_cls import config_dir

# (hparams_search config, the overrides its header documents it with)
SEARCHES = [
    ("digits_optuna", []),
    ("cifar10_optuna", ["experiment=cifar10_fast", "data=imagefolder", "data.root=/nowhere"]),
]


@pytest.mark.parametrize(("search", "overrides"), SEARCHES)
def test_search_space_keys_exist(search, overrides):
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        cfg = compose("train", [f"hparams_search={search}", *overrides], return_hydra_config=True)
    params = cfg.hydra.sweeper.params
    assert params, f"{search} searches nothing"
    missing = [k for k in params if OmegaConf.select(cfg, k, default="<missing>") == "<missing>"]
    assert not missing, f"{search} searches keys absent from the config: {missing}"
