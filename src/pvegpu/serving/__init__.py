"""What any serving engine's server of an LXC pool needs decided the same way.

plan() decides each serving pool's server once (`planning.decide.decided_servings`, which
decides the pool's `context` here first, then asks the engine registry, `pvegpu.engines`,
for the engine the spec names) and the pool carries it;
renderers only read it. The checks here do not depend on the engine, so they are written
once: P2P is decided from the IOMMU and SEV-SNP facts, NUMA pinning from the pool's GPUs,
the memory fit and the head divisibility come from the model's own config.json, and the
container's NVIDIA userspace is compared with the host's kernel module. What an engine
reads, checks and writes of its own (its release, its flags, its unit) is in its package
under `pvegpu.engines`.

Pure: every host file it looks at is in the facts (`pvegpu.host.serving_files` reads
them). Import from the modules; this package re-exports nothing, so loading one of them
loads only what it needs:

- `context`: `serving_context`, the neutral decisions of one pool made once before any
  engine runs, and the frozen `ServingContext` an engine's `decide` is handed;
- `checks`: where every decision records problems and findings; the decided values
  (`DecidedServer` and its parts, the model's config) are `pvegpu.model.decision` and
  `pvegpu.model.model_config`, below every stage;
- `p2p`, `numa`, `visible` (CUDA ordinals), `fit`, `container` (the container's files,
  Python and NVIDIA userspace): the engine-neutral decisions and checks;
- `systemd` (quoting) and `unitfile` (reading a unit back): systemd, for any engine's unit.
"""
