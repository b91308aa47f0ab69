"""Configuration: experiment files parsed into frozen specs (:mod:`.experiment`) and the per-trial spec
(:mod:`.trial`). The bottom layer: it imports nothing above it."""
