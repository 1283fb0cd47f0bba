"""adaptemb.index."""
