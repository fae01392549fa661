"""The immutable domain values every stage hands the next: nothing here reads a host.

- `facts` (`HostFacts` and its parts) and `bootconfig` (the next boot's settings): what
  discovery found;
- `schema` (`Spec`): what the split spec asks for;
- `plan` (`Plan`, `Pool`; its findings are `pvegpu.diagnostic.Diagnostic`s) and
  `released` (what other guests lose): what the planner decided; `decision`
  (`DecidedServer`) and `model_config` (the served model's `config.json`): a pool's
  decided server;
- `artifact` (`Artifact`): a file the bundle writes.

They sit below every stage so that each stage imports the values it needs from here
and never a stage above it (tests/test_architecture.py, `LAYERS`).
"""
