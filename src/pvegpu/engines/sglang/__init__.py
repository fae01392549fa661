"""SGLang, one serving engine (`pvegpu.engines.Engine`): what is SGLang's own.

Import from the modules; this package re-exports nothing, so loading one of them loads
only what it needs (`host/` reads the installed release and the option tables without
loading the planner):

- `engine`: `SGLANG`, the protocol's implementation the registry returns;
  `build`: `decide_serving`, the one factory of an SGLang `SglangServing`;
- `options`: the option tables of every release (data in `data/tables.json.gz`),
  built by `option_reader` from a release's sources
  (`make sglang-tables`); `option_check`: the command-line checker; `versions`: the
  version rules table; `installed`: the release installed in the container;
- `command` (the flags pvegpu derives), `environment` (the service's variables), `unit`
  (the unit text), `drops` (what the new unit would drop of the old).

What both engines do the same way (the checker, the packed tables, the installed
release, the drops comparison, the old unit and its drop-ins, the source evaluator, the
release ranges, the shared steps of `build`) is `engines.common`'s.
"""
