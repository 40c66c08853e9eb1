"""golden.config: channel and HUB configurations, device profiles and their
validation (bad values raise ConfigError naming the key)."""

import pytest

from golden.config import (
    ChannelConfig,
    ConfigError,
    HubConfig,
    Timing,
    load_profile,
    load_profile_data,
    slice_rows_for,
    small_config,
    small_hub_config,
)

DEX_TIMING = Timing(t_rcd=5, t_rp=4, t_ras=9, t_ccd=2, t_wr_inp=2, t_mac=3, t_rd_out=2)
DEX = ChannelConfig(banks=2, rows=8, cols=4, gbuf_entries=4, obuf_entries=2,
                    timing=DEX_TIMING, dual_path=True)


def test_config_errors_name_the_key():
    with pytest.raises(ConfigError, match="banks"):
        ChannelConfig(banks=17)
    with pytest.raises(ConfigError, match="timing.t_rcd"):
        ChannelConfig(timing=Timing(t_rcd=0))
    with pytest.raises(ConfigError, match="unknown configuration key 'bogus'"):
        load_profile("gddr6-aim", bogus=1)
    with pytest.raises(ConfigError, match="neither a known profile"):
        load_profile("no-such-device")
    with pytest.raises(ConfigError, match="policy must be one of"):
        ChannelConfig(policy="fifo")


@pytest.mark.parametrize("name", ["gddr6-aim", "gddr6-aim-assumed", "hbm2-pim", "hbm3-pim",
                                  "hbm-jitq"])
def test_profiles_load_with_sources(name):
    cfg = load_profile(name)
    assert cfg.banks == 16 and cfg.timing.t_rcd > 0
    assert {"t_rcd", "t_rp", "t_ras", "t_ccd"} <= set(load_profile_data(name)["sources"])


@pytest.mark.parametrize("name", ["gddr6-aim", "hbm2-pim", "hbm3-pim", "hbm-jitq"])
def test_device_profiles_cite_every_rule_and_have_bank_groups_and_refresh(name):
    """The device profiles: every timing value they set has its source (the
    execution times one together), and each has bank groups and refresh."""
    cfg, data = load_profile(name), load_profile_data(name)
    sources = data["sources"]
    for key, value in data["timing"].items():
        if key in ("t_wr_inp", "t_mac", "t_rd_out"):
            assert "execution_times" in sources
        else:
            assert key in sources and str(value) in sources[key], (key, value)
    assert cfg.bank_groups == 4 and cfg.timing.t_refi > 0 and cfg.timing.t_rfc > 0
    assert cfg.timing.t_ccd_l >= cfg.timing.t_ccd and cfg.timing.t_rc > 0


def test_dual_path_config_errors():
    with pytest.raises(ConfigError, match="slice_rows=4 needs dual_path"):
        ChannelConfig(rows=8, slice_rows=4)
    with pytest.raises(ConfigError, match=r"slice_rows must be an integer in \[0, 7\]"):
        DEX.replace(slice_rows=8)
    with pytest.raises(ConfigError, match="in-order controller"):
        DEX.replace(policy="dcs")
    with pytest.raises(ConfigError, match="does not split 8 rows"):
        slice_rows_for(8, 1, 2)
    assert slice_rows_for(8, 1, 3) == 2 and slice_rows_for(16384, 3, 1) == 12288
    with pytest.raises(ConfigError, match="timing.t_faw must be an integer in"):
        DEX.replace(t_faw=-1)
    assert load_profile("gddr6-aim", dual_path=True, slice_rows=8192).slice_rows == 8192


@pytest.mark.parametrize("change, match", [
    ({"n_channels": 0}, "n_channels must be an integer"),
    ({"requests": 1 << 20}, "requests must be an integer"),
    ({"gpr_entries": 100}, "gpr_entries must be a power of two"),
    ({"chunk_bytes": 1000}, "chunk_bytes=1000 must be a power-of-two multiple"),
    ({"channel": "gddr6-aim"}, "channel must be a ChannelConfig"),
])
def test_hub_config_errors_name_the_key(change, match):
    good = small_hub_config()
    fields = {k: getattr(good, k) for k in good.__dataclass_fields__}
    with pytest.raises(ConfigError, match=match):
        HubConfig(**{**fields, **change})


@pytest.mark.parametrize("change, match", [
    ({"n_channels": 0}, "n_channels must be an integer"),
    ({"gpr_entries": 100}, "gpr_entries must be a power of two"),
    ({"requests": 0}, "requests must be an integer"),
])
def test_hub_config_defaults_are_valid_so_errors_name_the_key_given(change, match):
    """HubConfig() itself validates (the default chunk: 1 MB, or what the
    default channel's rows hold), so a bad key given alone is the one the
    error names."""
    hub = HubConfig()
    assert hub.chunk_bytes == min(1 << 20, hub.row_bytes * hub.channel.rows)
    with pytest.raises(ConfigError, match=match):
        HubConfig(**change)


def test_hub_config_needs_power_of_two_columns():
    with pytest.raises(ConfigError, match="channel.cols must be a power of two"):
        HubConfig(channel=small_config().replace(cols=24))
