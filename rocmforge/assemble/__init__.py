"""Stage 4, build: a planned target built on the engine (its step lock and builder cache), then
normalised into a canonical image whose ID depends on content alone."""
