"""Commands that manage compressors: plugins, fit, compress, info."""
