"""Pure functions, one per quantity, over floats or numpy arrays. No I/O, no state."""
