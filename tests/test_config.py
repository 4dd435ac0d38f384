"""config.ini and node.id parsing (docs/reference/configuration.md)."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from fabricjobs.config import (
    KEYS, AffinityLimit, defaults, find_config, load_config, parse_config, parse_node_id,
)
from fabricjobs.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent


def test_every_key_has_the_specs_default():
    cfg = defaults()
    expected = {
        ("node", "DC"): "DC1",
        ("jobs", "K2JOBS_POOL_SIZE"): 25,
        ("jobs", "K2JOB_ARCHIVING_TIME_HOUR"): 720,
        ("jobs", "CLAIM_EXCEPTIONAL_INTERVAL_SEC"): 60,
        ("jobs", "MIN_GIVE_UP_EXCEPTIONAL_MINUTES"): 1,
        ("jobs", "MAX_GIVE_UP_EXCEPTIONAL_MINUTES"): 1440,
        ("jobs", "MAX_TRIES"): 10,
        ("jobs", "RETRY_DELAY_SEC"): 60,
        ("jobs", "RECONCILE_INTERVAL_MS"): 1000,
        ("heartbeat", "FABRIC_HEARTBEAT_INTERVAL_MS"): 5000,
        ("heartbeat", "FABRIC_HEARTBEAT_MISS"): 12,
        ("store", "BACKEND"): "sqlite",
        ("store", "SQLITE_PATH"): "./fabricjobs.db",
        ("cassandra", "PORT"): 9042,
        ("cassandra", "KEYSPACE"): "k2system",
    }
    for (section, name), value in expected.items():
        assert cfg.get(section, name) == value, (section, name)


def test_values_are_typed_and_keys_case_insensitive(tmp_path):
    p = tmp_path / "config.ini"
    p.write_text("[JOBS]\nk2jobs_pool_size = 7\nMax_Tries=3\n[store]\nsqlite_path = data/j.db\n[cassandra]\nHOSTS = a, b c\nTLS = yes\n")
    cfg = load_config(p)
    assert cfg.get("jobs", "K2JOBS_POOL_SIZE") == 7 and cfg.get("jobs", "MAX_TRIES") == 3
    assert cfg.get("store", "SQLITE_PATH") == str(tmp_path / "data" / "j.db")  # relative to the file
    assert cfg.get("cassandra", "HOSTS") == ("a", "b", "c") and cfg.get("cassandra", "TLS") is True


@pytest.mark.parametrize(
    "text, message",
    [
        ("[jobs]\nK2JOBS_POOL_SIZE = lots\n", "[jobs] K2JOBS_POOL_SIZE: expected an integer, got 'lots'"),
        ("[jobs]\nK2JOBS_POOL_SIZE = 0\n", "[jobs] K2JOBS_POOL_SIZE: must be at least 1"),
        ("[heartbeat]\nFABRIC_HEARTBEAT_MISS = 1\n", "[heartbeat] FABRIC_HEARTBEAT_MISS: must be at least 3"),
        ("[store]\nBACKEND = mysql\n", "[store] BACKEND: expected one of SQLITE, CASSANDRA, got 'mysql'"),
        ("[node]\nTIME_ZONE = Mars/Base\n", "[node] TIME_ZONE: unknown time zone 'Mars/Base'"),
        ("[cassandra]\nTLS = maybe\n", "[cassandra] TLS: expected true or false"),
        ("[cassandra]\nCONSISTENCY = ONE\n", "[cassandra] CONSISTENCY: ONE is refused: reads at ONE can miss a quorum's writes"),
        ("[cassandra]\nCONSISTENCY = local_one\n", "[cassandra] CONSISTENCY: LOCAL_ONE is refused"),
        ("[jobs]\nMIN_GIVE_UP_EXCEPTIONAL_MINUTES = 9\nMAX_GIVE_UP_EXCEPTIONAL_MINUTES = 2\n", "larger than MAX_GIVE_UP"),
        ("[jobs\nK2JOBS_POOL_SIZE = 1\n", "config"),
        ("K2JOBS_POOL_SIZE = 1\n", "no section header"),
        ("[node]\nADDRESSES = 10.0.0.1, node-a\n", "[node] ADDRESSES: not an IP address: 'node-a'"),
        # nan passed every bound (a SHUTDOWN_GRACE_SEC of nan gave running jobs no time at all)
        ("[jobs]\nSHUTDOWN_GRACE_SEC = nan\n", "[jobs] SHUTDOWN_GRACE_SEC: expected a finite number, got 'nan'"),
        ("[jobs]\nDEPENDENCY_CHECK_SEC = inf\n", "[jobs] DEPENDENCY_CHECK_SEC: expected a finite number"),
        # ports past 65535 crashed the node with a traceback; a pool of 10^8 slots filled the disk
        ("[metrics]\nPORT = 70000\n", "[metrics] PORT: must be at most 65535, got 70000"),
        ("[cassandra]\nPORT = 99999\n", "[cassandra] PORT: must be at most 65535"),
        ("[jobs]\nK2JOBS_POOL_SIZE = 100000000\n", "[jobs] K2JOBS_POOL_SIZE: must be at most 4096"),
        # each wait holds one of the web process's 100 threads: 10 stay for short requests
        ("[web]\nMAX_WAITS = 500\n", "[web] MAX_WAITS: must be at most 90, got 500"),
        ("[web]\nMAX_WAITS_PER_TOKEN = 100\n", "[web] MAX_WAITS_PER_TOKEN: must be at most 90"),
        # keys are case-insensitive, so two spellings are one key given twice (the last one won)
        ("[jobs]\nMAX_TRIES = 3\nmax_tries = 4\n", "[jobs] MAX_TRIES is given twice ('MAX_TRIES' and 'max_tries')"),
        ("[jobs]\nMAX_TRIES = 3\n[Jobs]\nMAX_TRIES = 4\n", "[jobs] MAX_TRIES is given twice"),
    ],
)
def test_bad_values_are_rejected_naming_the_key(text, message):
    with pytest.raises(ConfigError) as err:
        parse_config(text)
    assert message in str(err.value)


def test_node_addresses_are_canonical_and_an_affinity_matches_any_spelling():
    from fabricjobs.affinity import NodeAffinity, parse_affinity
    from fabricjobs.config import NodeId

    cfg = parse_config("[node]\nADDRESSES = 10.0.0.1 fd00:0::1\n")
    assert cfg.node_addresses == ("10.0.0.1", "FD00::1")
    node = NodeAffinity.from_node_id("n1", "DC1", NodeId({}), 4, cfg.node_addresses)
    assert node.can_run(parse_affinity("fd00::0:1")) and node.can_run(parse_affinity('{"Affinity": ["10.0.0.1"]}'))
    assert not node.can_run(parse_affinity("10.0.0.2"))
    seen = NodeAffinity.from_info("n1", "DC1", node.to_info())  # as other nodes and the shell see it
    assert seen.addresses == node.addresses and seen.can_run(parse_affinity("10.0.0.1"))


def test_unknown_keys_and_sections_are_warned_not_fatal(caplog):
    with caplog.at_level(logging.WARNING):
        cfg = parse_config("[jobs]\nK2JOBS_POOL_SZE = 3\n[nonsense]\na = 1\n")
    assert cfg.get("jobs", "K2JOBS_POOL_SIZE") == 25
    assert any("unknown key [jobs] K2JOBS_POOL_SZE" in w for w in cfg.warnings)
    assert any("unknown section [nonsense]" in w for w in cfg.warnings)
    assert "K2JOBS_POOL_SZE" in caplog.text


def test_a_default_section_and_a_comment_after_a_value_are_warned_not_taken_silently():
    """[DEFAULT]'s keys joined every section unseen (or vanished); a ``#`` after a value (the
    deployment guide had them) is part of the value: a USER_JOBS_DIR of 'jobs   # ...'."""
    cfg = parse_config("[DEFAULT]\nMAX_TRIES = 7\n[jobs]\nUSER_JOBS_DIR = jobs   # the job modules\n[store]\n")
    assert cfg.get("jobs", "MAX_TRIES") == 10  # (the default: [DEFAULT] is no section of ours)
    assert any("unknown section [DEFAULT] ignored" in w for w in cfg.warnings), cfg.warnings
    assert any("[jobs] USER_JOBS_DIR: '#' after a space is part of the value" in w for w in cfg.warnings), cfg.warnings


def test_config_is_found_by_flag_then_environment_then_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FABRICJOBS_CONFIG", raising=False)
    assert find_config(None) is None
    (tmp_path / "config.ini").write_text("")
    assert find_config(None) == Path("config.ini")
    monkeypatch.setenv("FABRICJOBS_CONFIG", "/etc/fj.ini")
    assert find_config(None) == Path("/etc/fj.ini")
    assert find_config("x.ini") == Path("x.ini")


def test_example_config_documents_every_key_and_parses_cleanly():
    text = (ROOT / "config.ini.example").read_text()
    documented = set(re.findall(r"^#?\s*([A-Z0-9_]+)\s*=", text, flags=re.M))
    missing = {k.name for k in KEYS} - documented
    assert not missing, f"config.ini.example lacks {sorted(missing)}"
    cfg = parse_config(text)
    assert cfg.warnings == ()


# -- node.id ---------------------------------------------------------------------------------

def test_node_id_lines_comments_and_blank_lines():
    nid = parse_node_id("# comment\n\nHANDLE_MSG:5 10   # inline\nany:0\nlu_sync : 3\n")
    assert nid.limits["HANDLE_MSG"] == AffinityLimit("HANDLE_MSG", 5, 10)
    assert nid.limits["ANY"] == AffinityLimit("ANY", 0, 0)
    assert nid.limits["LU_SYNC"] == AffinityLimit("LU_SYNC", 3, 3)


def test_any_is_on_by_default_with_the_pool_size():
    nid = parse_node_id("HANDLE_MSG:5\n")
    assert nid.limit("ANY", 25) == AffinityLimit("ANY", 25, 25)
    assert nid.limit("handle_msg", 25) == AffinityLimit("HANDLE_MSG", 5, 5)
    assert nid.limit("OTHER", 25) is None


@pytest.mark.parametrize(
    "text, message",
    [
        ("ANY:0\nHANDLE_MSG 5\n", "line 2: expected 'NAME:recommended [absolute]'"),
        ("HANDLE_MSG:ten\n", "line 1"),
        ("\n\nX:5 2\n", "line 3: absolute maximum 2 is below the recommended 5"),
        ("X:1\nx:2\n", "line 2: X is given twice"),
        ("X:-1\n", "line 1"),
    ],
)
def test_bad_node_id_lines_are_rejected_with_their_line_number(text, message):
    with pytest.raises(ConfigError) as err:
        parse_node_id(text, source="node.id")
    assert message in str(err.value)


def test_example_node_id_parses():
    nid = parse_node_id((ROOT / "node.id.example").read_text())
    assert nid.limits["HANDLE_MSG"] == AffinityLimit("HANDLE_MSG", 5, 10)
    assert nid.limit("ANY", 25).recommended == 0
