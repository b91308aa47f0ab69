"""A plugin module that fails on import, as a third-party adapter with a missing dependency would."""

raise RuntimeError("this plugin needs libfoo 3, which is not installed")
