"""The largest batch that fits: search strategy, request and budget, probes in fresh workers, advice."""
