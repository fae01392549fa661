"""Secret values are blanked in review text; everything else is kept as it was."""

from __future__ import annotations

import pytest

from pvegpu.redact import (
    MARK,
    holds_secret,
    is_secret_name,
    is_secret_option,
    redact_argv,
    redact_pairs,
    redact_text,
)

UNIT = """[Service]
Environment=HF_TOKEN=hf_abc123 NCCL_DEBUG=WARN
Environment="OPENAI_API_KEY=sk-xyz" "PATH=/usr/bin"
Environment='DB_PASSWORD=p@ss word' X=1
ExecStart=/usr/bin/python3 -m sglang.launch_server --api-key s3cr3t --port 30000 \\
    --admin-api-key=abc --tp 4
Environment=TOKENIZERS_PARALLELISM=false MAX_TOTAL_TOKENS=4096
"""


def test_unit_secrets_are_blanked_and_nothing_else_changes() -> None:
    redacted = redact_text(UNIT)
    for secret in ("hf_abc123", "sk-xyz", "p@ss word", "s3cr3t", "=abc"):
        assert secret not in redacted
    assert redacted.splitlines()[1:6] == [
        f"Environment=HF_TOKEN={MARK} NCCL_DEBUG=WARN",
        f'Environment="OPENAI_API_KEY={MARK}" "PATH=/usr/bin"',
        f"Environment='DB_PASSWORD={MARK}' X=1",
        f"ExecStart=/usr/bin/python3 -m sglang.launch_server --api-key {MARK} --port 30000 \\",
        f"    --admin-api-key={MARK} --tp 4",
    ]
    assert redacted.splitlines()[6] == UNIT.splitlines()[6]  # token counts are no secret
    assert redacted.count("\n") == UNIT.count("\n")


def test_environment_file_lines() -> None:
    assert redact_text("export HF_TOKEN=hf_x\nHOME=/root\r\n") == (
        f"export HF_TOKEN={MARK}\nHOME=/root\r\n"
    )


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("HF_TOKEN", True),
        ("HUGGING_FACE_HUB_TOKEN", True),
        ("OPENAI_API_KEY", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("DB_PASSWORD", True),
        ("MYSECRETTHING", True),
        ("TOKENIZERS_PARALLELISM", False),
        ("MAX_TOKENS", False),
        ("CUDA_HOME", False),
        ("KEYBOARD", False),
    ],
)
def test_secret_names(name: str, secret: bool) -> None:
    assert is_secret_name(name) is secret


def test_secret_options_and_argv() -> None:
    assert is_secret_option("--api-key") and is_secret_option("--admin-api-key=x")
    assert not is_secret_option("--tp-size") and not is_secret_option("--max-total-tokens")
    assert redact_argv(("--api-key", "v", "--port", "1", "--admin-api-key=z")) == (
        "--api-key",
        MARK,
        "--port",
        "1",
        f"--admin-api-key={MARK}",
    )
    assert redact_pairs((("HF_TOKEN", "x"), ("A", "b"))) == (("HF_TOKEN", MARK), ("A", "b"))
    assert holds_secret(UNIT) and not holds_secret("Environment=A=1\n")
