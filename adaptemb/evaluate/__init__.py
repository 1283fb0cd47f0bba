"""adaptemb.evaluate."""
