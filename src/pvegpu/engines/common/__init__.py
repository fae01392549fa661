"""What the engines do the same way, written once: each engine package hands it its own
names (its pip distribution, its parser's rules, its release's file layout) and keeps
the rest.

- `installed`: where pip put an engine's release for the unit's python, and which release
  the unit is rendered for (installed, else the spec's); `installed_files`: the container
  files discovery reads for it, through the root reader it is handed;
- `tables`: the one compressed file an engine's shipped option tables are packed in
  (read here, written by the maintainer tools through `pack_bundle`), and the fields every
  argparse entry has;
- `option_check`: the strict argparse-like checker of a command line against a release's
  table, run with the engine's `ParserRules`;
- `command`: the spec's extra_args read by the release's table, refused where they set
  an option the engine writes; `environment`: the unit's Environment= (CUDA, NCCL, the
  spec's variables checked); `unit`: the one unit text every engine fills;
- `drops`: what the rendered unit leaves out of the container's current one (the engine
  compares its own command line);
- `server`: the steps of deciding a server that do not depend on the engine (the spec's
  value rules, the whole command line checked again, the refusal, the P2P finding, the
  health URL), and `unit_secrets`: secrets the current unit holds and where the new one
  reads them.
- `old_unit`: the server's unit as systemd runs it now, its copies, and `dropins`: the
  drop-ins that set what the rendered unit decides, switched off by the bundle;
- `python_source`: the static evaluator of an engine's Python sources its option reader
  builds a release's table with (following the engine's own package's imports);
- `releases`: release numbers and the `Versions` ranges an engine's release tables use;
- `config_file`: the flat YAML subset a `--config FILE` of either engine holds;
  `deprecations`: the wording of a flag an engine's release table deprecates.

No engine imports another: what two engines do the same way is here.
"""
