"""adaptemb.encoders."""
