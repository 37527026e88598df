"""The available models: --model repeated, --models-dir, --models-config (TOML and JSON, a
`*` table under per-model tables, flags over both), names, and the errors that name the file,
the table and the key."""

from __future__ import annotations

import json

import pytest

from triode.errors import SettingsError
from triode.model.catalog import catalog, kv_budget, native_context, source_names
from triode.settings import resolve
from triode.tenants import parse

from ..fixtures.families import FAMILIES, build


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    """A directory of models: a Llama 3 fixture directory, a stray file, an empty one."""
    root = tmp_path_factory.mktemp("models")
    build(FAMILIES["llama3"], root / "llama3-fixture")
    (root / "notes.txt").write_text("not a model")
    (root / "empty").mkdir()
    return root


def settings(**kw):
    return resolve({k: v for k, v in kw.items()}, {})


def test_one_model_is_today_s_server_loaded_at_start_and_kept():
    (spec,) = catalog(settings())
    assert spec.id == "triode-tiny" and "bundled" in spec.names
    assert spec.preload and spec.pinned


def test_several_models_the_first_loads_at_start_none_is_pinned():
    specs = catalog(settings(model=["bundled", "smollm2"], keep_alive="90s"))
    assert [s.id for s in specs] == ["triode-tiny", "smollm2"]
    assert [s.preload for s in specs] == [True, False]
    assert not any(s.pinned for s in specs) and {s.keep_alive for s in specs} == {90.0}


def test_a_models_dir_offers_each_model_by_its_name_and_replaces_the_bundled(models_dir):
    specs = catalog(settings(models_dir=str(models_dir)))
    assert [s.id for s in specs] == [str(models_dir / "llama3-fixture")]
    assert "llama3-fixture" in specs[0].names and not specs[0].preload
    both = catalog(settings(model=["bundled"], models_dir=str(models_dir)))
    assert [s.id for s in both] == ["triode-tiny", str(models_dir / "llama3-fixture")]


def test_the_config_file_a_star_table_under_model_tables_flags_over_both(tmp_path,
                                                                           models_dir):
    config = tmp_path / "models.toml"
    config.write_text(f'''
["*"]
keep_alive = "10m"
kv_bits = 8

[smollm2]
alias = "small"
context_length = 2048
pinned = true
keep_alive = -1

[coder]
path = "{models_dir / 'llama3-fixture'}"
speculative = "off"
''')
    specs = {s.id: s for s in catalog(settings(model=["bundled", "smollm2"],
                                               models_config=str(config)))}
    assert list(specs) == ["triode-tiny", "small", "coder"]
    small, coder, tiny = specs["small"], specs["coder"], specs["triode-tiny"]
    assert "smollm2" in small.names and small.pinned and small.keep_alive == -1
    assert (small.context_length, small.kv_bits) == (2048, 8)
    assert (coder.speculative, coder.keep_alive, coder.kv_bits) == ("off", 600.0, 8)
    assert tiny.keep_alive == 600.0 and not tiny.pinned
    flagged = {s.id: s for s in catalog(settings(model=["bundled", "smollm2"],
                                                 models_config=str(config), kv_bits=4,
                                                 context_length=512))}
    assert (flagged["small"].kv_bits, flagged["small"].context_length) == (4, 512)


def test_a_json_config_reads_as_the_toml_one(tmp_path):
    config = tmp_path / "models.json"
    config.write_text(json.dumps({"smollm2": {"alias": "small"}}))
    assert [s.id for s in catalog(settings(model=["bundled", "smollm2"],
                                           models_config=str(config)))] == [
        "triode-tiny", "small"]


@pytest.mark.parametrize("text,message", [
    ('[smollm2]\ncontext = 5', "[smollm2] context: unknown setting"),
    ('[smollm2]\npinned = "yes"', "[smollm2] pinned: 'yes' is not a bool"),
    ('[smollm2]\nkv_bits = true', "[smollm2] kv_bits: True is not a int"),
    ('[smollm2]\nkeep_alive = "soon"', "[smollm2] keep_alive: expected seconds"),
    ('[ghost]\nalias = "g"', "[ghost] names no available model and has no `path`"),
    ('[smollm2]\nkv_bits = 3', "model smollm2: kv_bits must be 0, 4 or 8"),
    ('[smollm2]\nalias = "triode-tiny"', "two models answer to 'triode-tiny'"),
    ("not toml [", "cannot be read"),
])
def test_a_bad_config_is_a_start_error_naming_file_table_and_key(tmp_path, text, message):
    config = tmp_path / "models.toml"
    config.write_text(text)
    with pytest.raises(SettingsError) as refused:
        catalog(settings(model=["bundled", "smollm2"], models_config=str(config)))
    assert message in str(refused.value) and str(config) in str(refused.value)


def test_names_and_what_the_files_say_before_a_load(models_dir):
    assert source_names("x/y/m.gguf", "alias") == ("alias", "x/y/m.gguf", "m.gguf", "m")
    (spec,) = catalog(settings(model=[str(models_dir / "llama3-fixture")]))
    assert native_context(spec) == 4096
    # 2 layers x 1 KV head x 32 dims x (K and V) x 4 bytes x 4096 positions x 3 slots
    assert kv_budget(spec, 3) == 2 * 1 * 32 * 2 * 4 * 4096 * 3


def test_a_tenant_may_list_its_models_and_be_an_admin():
    table = parse(json.dumps({"tenants": {
        "a": {"keys": ["ka"], "models": ["small"], "admin": True},
        "b": {"keys": ["kb"]}}}), "keys.json")
    a, b = table.find("Bearer ka"), table.find("Bearer kb")
    assert a.admin and a.may_use(("x", "small")) and not a.may_use(("x",))
    assert not b.admin and b.may_use(("anything",))
    for bad, message in (({"keys": ["k"], "admin": "yes"}, "admin must be true or false"),
                         ({"keys": ["k"], "models": "small"}, "models must be a list")):
        with pytest.raises(SettingsError) as refused:
            parse(json.dumps({"tenants": {"t": bad}}), "keys.json")
        assert message in str(refused.value)
