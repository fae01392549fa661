"""vLLM as a serving engine: `vllm serve MODEL` in a systemd unit of the pool's container.

Beside `engines.sglang`, behind the same `Engine` protocol (`engine.py`): the release
installed in the container (`installed.py`, `installed_files.py`), the option table of
every covered release (`options.py`, data in `data/tables.json.gz`, built by
`option_reader.py` from each release's wheel), the command-line checker
(`option_check.py`), the version rules (`versions.py`), the flags (`command.py`; its
environment is every engine's, `engines.common.environment`), the unit (`unit.py`), what
the new unit drops (`drops.py`) and `decide_serving` (`build.py`), each holding only what
is vLLM's: the rest is `engines.common`'s, as for SGLang (the old unit and its drop-ins
too: `engines.common.old_unit`).
"""
