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

The SGLang modules the vLLM engine also uses as they are (`engines.sglang.old_unit`,
`dropins`, and the option source evaluator `option_source`, which vLLM's reader extends
to follow its own tree's imports) stay where they were written.
"""
