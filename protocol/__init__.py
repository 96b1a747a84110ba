"""Pure codecs and message shapes: no I/O, no trio. Everything above depends on this, never the reverse."""
