"""Each framework's environment: the interpreter its workers run in, and how that interpreter is made.

The parent (CLI, runner, sampler, store, report) holds no framework. A framework's workers run in one of:

- **the user's own interpreter**, named in the experiment (``[environments] pytorch = "/path/bin/python"``) or on the
  command line (``--python pytorch=/path/bin/python``), checked before the first trial (:mod:`.check`);
- **a managed environment** built from the framework's lock file (``adapters/<framework>/locks/<kind>.txt``: exact
  versions, numpy included) into the cache, named by the lock's hash, built once and reused (:mod:`.build`);
- **the parent's interpreter**, for an adapter that declares no framework environment of its own (a test's fake).

Nothing here imports a framework: what an environment holds is read by a small script run there
(:mod:`.facts`). docs/environments.md is the user's guide.
"""
