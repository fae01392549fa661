"""The SGLang server of an LXC pool: command line, environment, pinning and checks, as values.

plan() decides each serving pool's `SglangServing` once (`build.decided_servings`) and
the pool carries it; renderers only read it. What the seed deployment got wrong cannot
be written down: the TP size is the pool's GPU count (a `--tp 8` left over from the
8-GPU layout cannot survive), flags come from the option table of the SGLang version the
spec names, P2P is decided from the IOMMU and SEV-SNP facts, the memory fit and the head
divisibility come from the model's own config.json, and the container's NVIDIA userspace
is compared with the host's kernel module.

Pure: every host file it looks at is in the facts (`pvegpu.host.serving_files` reads
them). Import from the modules; this package re-exports nothing, so loading one of them
loads only what it needs:

- `decision`: the values (`SglangServing` and its parts); `build`: deciding them;
- `versions`: the version rules table; `options`: SGLang's option tables;
  `option_check`: the command-line checker;
- `command`, `environment`, `p2p`, `numa`, `fit`, `container`, `model_config`: the
  decisions and checks, each recording into `checks.Checks`;
- `systemd` (quoting), `unit` (the unit text), `unitfile` and `drops` (reading the
  container's current unit back, and what the new one would drop of it).
"""
