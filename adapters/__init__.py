"""Framework adapters. Each module imports its framework lazily, inside the adapter's methods,
so that importing the module (to list adapters) costs nothing and imports no framework."""
