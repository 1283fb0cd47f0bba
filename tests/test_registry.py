"""The pluggy registry: discovery, attribution, duplicates, misses, disabling, broken plugins."""

import importlib.metadata
import types

import pluggy
import pytest

import adaptemb
from adaptemb.registry import CompressorRegistry, PluginSource, reset_plugins

BUILTINS = {"binary", "int8", "mrl", "svd"}


def _plugin_adding(cls: type) -> types.SimpleNamespace:
    @adaptemb.hookimpl
    def register_compressors(registry: CompressorRegistry) -> None:
        registry.add(cls)

    return types.SimpleNamespace(register_compressors=register_compressors)


def test_builtins_come_through_the_entry_point_group() -> None:
    infos = {info.name: info for info in adaptemb.list_compressors()}
    assert BUILTINS <= set(infos)
    for name in BUILTINS:
        source = infos[name].source
        assert (source.plugin, source.package, source.version) == (name, "adaptemb", adaptemb.__version__)
        assert infos[name].budgets and infos[name].summary


def test_unknown_method_lists_what_exists_and_suggests_the_closest() -> None:
    with pytest.raises(adaptemb.UnknownCompressorError) as caught:
        adaptemb.get_compressor("sdv")
    message = str(caught.value)
    assert "unknown compressor 'sdv'" in message and "did you mean 'svd'?" in message
    listed = message.split("available: ")[1].split(", ")
    assert listed == sorted(adaptemb.get_registry().names()) and BUILTINS <= set(listed)
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, KeyError)
    with pytest.raises(adaptemb.UnknownCompressorError, match="available:"):
        adaptemb.compress(__import__("numpy").ones((2, 2), dtype="float32"), method="zzz")


def test_a_plugin_registered_at_run_time_is_found_and_attributed(fresh_plugins: None) -> None:
    svd = adaptemb.get_registry().get("svd")
    mine = type("MySVD", (svd,), {"name": "mysvd", "__doc__": "My SVD."})
    adaptemb.register_plugin(_plugin_adding(mine), name="my-plugin")
    info = adaptemb.get_registry().info("mysvd")
    assert info.cls is mine and info.source == PluginSource("my-plugin") and info.summary == "My SVD."
    adaptemb.unregister_plugin("my-plugin")
    assert "mysvd" not in adaptemb.get_registry()


def test_duplicate_name_is_an_error_naming_both_sources(fresh_plugins: None) -> None:
    svd = adaptemb.get_registry().get("svd")
    clash = type("OtherSVD", (svd,), {"name": "svd"})
    adaptemb.register_plugin(_plugin_adding(clash), name="clashing-plugin")
    with pytest.raises(adaptemb.DuplicateCompressorError) as caught:
        adaptemb.get_registry()
    message = str(caught.value)
    assert "plugin 'svd' from adaptemb" in message and "plugin 'clashing-plugin'" in message
    assert "OtherSVD" in message and "SVDCompressor" in message


def test_misspelled_hook_fails_at_registration(fresh_plugins: None) -> None:
    @adaptemb.hookimpl
    def register_compresors(registry: CompressorRegistry) -> None:  # typo on purpose
        pass

    with pytest.raises(pluggy.PluginValidationError, match="register_compresors"):
        adaptemb.register_plugin(types.SimpleNamespace(register_compresors=register_compresors), name="typo")


def test_environment_variable_disables_plugins(fresh_plugins: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ADAPTEMB_DISABLE_PLUGINS", "svd, int8")
    reset_plugins()
    assert set(adaptemb.get_registry().names()) & BUILTINS == {"binary", "mrl"}
    monkeypatch.setenv("ADAPTEMB_DISABLE_PLUGINS", "all")
    reset_plugins()
    assert adaptemb.get_registry().names() == []
    with pytest.raises(adaptemb.UnknownCompressorError, match="none \\(no plugin is loaded\\)"):
        adaptemb.get_compressor("svd")


def test_a_broken_plugin_warns_and_the_rest_still_load(fresh_plugins: None, monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.metadata.entry_points(group="adaptemb")
    broken = importlib.metadata.EntryPoint(name="broken", value="no_such_module_for_adaptemb", group="adaptemb")
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [*real, broken])
    reset_plugins()
    with pytest.warns(RuntimeWarning, match="skipping plugin 'broken'.*ADAPTEMB_DISABLE_PLUGINS=broken"):
        names = adaptemb.get_registry().names()
    assert BUILTINS <= set(names)


def test_registry_add_rejects_what_is_not_a_concrete_named_compressor() -> None:
    registry = CompressorRegistry()
    with pytest.raises(TypeError, match="concrete Compressor subclass"):
        registry.add(int)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="concrete Compressor subclass"):
        registry.add(adaptemb.Compressor)
    svd = adaptemb.get_registry().get("svd")
    with pytest.raises(ValueError, match="lower-case identifier"):
        registry.add(type("Bad", (svd,), {"name": "Has Space"}))


def test_compositions_come_through_a_plugin_not_a_global() -> None:
    """``"a+b"`` resolves through the composer a built-in plugin adds to the registry it fills: a registry no
    plugin filled composes nothing (no process-wide composer), the loaded one does, and the composer's source is
    the core's plugin, registered like every other."""
    bare = CompressorRegistry()
    bare.add(adaptemb.get_registry().get("svd"))
    bare.add(adaptemb.get_registry().get("binary"))
    with pytest.raises(adaptemb.UnknownCompressorError, match="no composer is loaded"):
        bare.get("svd+binary")
    assert adaptemb.get_registry().get("svd+binary").__name__ == "SvdBinaryCompressor"
    assert "adaptemb-compositions" in dict(adaptemb.registry.plugin_manager().list_name_plugin())
