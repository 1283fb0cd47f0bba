"""adaptemb's built-in methods. Each module is one plugin, registered through the ``adaptemb``
entry-point group exactly as a third-party plugin is; none reaches into the core's internals."""
