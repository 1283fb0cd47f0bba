"""The plugin registry, one job a module:

* ``hookspecs``: the hooks adaptemb calls on plugins (``register_compressors``, ``register_index_backends``) and
  the ``hookimpl`` marker;
* ``compressors``: ``CompressorRegistry``, method names to classes, and the composer ``"projection+quantizer"``
  names resolve through (a factory a plugin adds: ``adaptemb.compose``);
* ``indexes``: ``IndexRegistry``, backends by (query kind, document kind), and the index ``build_index`` makes;
* ``manager``: the plugin manager (the core's plugins, the ``adaptemb`` entry points, ``register_plugin``) and the
  registries it fills (``get_registry``, ``get_index_registry``);
* ``sources``: where each registered thing came from.
"""

from adaptemb.registry.compressors import COMPOSE_SEPARATOR, CompressorInfo, CompressorRegistry
from adaptemb.registry.hookspecs import (
    adds_compressors,
    adds_index_backends,
    hookimpl,
    hookspec,
    register_compressors,
    register_index_backends,
)
from adaptemb.registry.indexes import IndexBackendInfo, IndexRegistry
from adaptemb.registry.manager import (
    build_index,
    get_index_registry,
    get_registry,
    plugin_manager,
    register_plugin,
    reset_plugins,
    unregister_plugin,
)
from adaptemb.registry.sources import DISABLE_ENV_VAR, ENTRY_POINT_GROUP, PluginSource

__all__ = [
    "COMPOSE_SEPARATOR",
    "DISABLE_ENV_VAR",
    "ENTRY_POINT_GROUP",
    "CompressorInfo",
    "CompressorRegistry",
    "IndexBackendInfo",
    "IndexRegistry",
    "PluginSource",
    "adds_compressors",
    "adds_index_backends",
    "build_index",
    "get_index_registry",
    "get_registry",
    "hookimpl",
    "hookspec",
    "plugin_manager",
    "register_compressors",
    "register_index_backends",
    "register_plugin",
    "reset_plugins",
    "unregister_plugin",
]
