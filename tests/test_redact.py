"""Redaction rules: true positives and false positives per rule, in the style of gitleaks."""

from __future__ import annotations

import hashlib
import json
import re
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from opsrun._redact import (
    DEFAULT_REDACTOR,
    MASK,
    Redactor,
    redact_text,
    redact_value,
    sha256_text,
)
from opsrun.errors import ConfigError

# Realistic shapes (fake values). Assembled from parts so the file itself does not
# trip secret scanners.
OPENAI_LEGACY = "sk-" + "T3BlbkFJ" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8s9T0"
OPENAI_PROJ = "sk-proj-" + "Ab3dEfGhIjKlMnOpQrStUvWxYz0123456789_-abcdEFGHijklMNOP"
OPENAI_SVC = "sk-svcacct-" + "AbCdEf0123456789AbCdEf0123456789xyzXYZ"
OPENAI_ADMIN = "sk-admin-" + "AbCdEf0123456789AbCdEf0123456789xyz_-Q"
ANTHROPIC = "sk-ant-" + "api03-AbCdEf0123456789AbCdEf0123456789xyz-_AAQxyz"
AWS_ID = "AKIA" + "IOSFODNN7EXAMPLE"
AWS_STS_ID = "ASIA" + "Y3KR2XQ7EXAMPLE1"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY"
GOOGLE = "AIza" + "SyA1234567890abcdefghijklmnopqrstuv"
GH_TOKENS = [p + "a1B2" * 9 for p in ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")]
GH_PAT = "github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789"
SLACK = ["xox" + k + "-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx" for k in "abpr"]
STRIPE = [p + "4eC39HqLyjWDarjtT1zdp7dc" for p in ("sk_live_", "rk_live_", "pk_live_", "sk_test_")]
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
    ".eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIn0"
    ".dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
)
BASIC = "dXNlcjpwYXNzd29yZA=="
BEARER = "abc123DEF456ghi789jkl"

# (secret, the prefix that may survive)
TOKEN_CASES = [
    (OPENAI_LEGACY, "sk-"),
    (OPENAI_PROJ, "sk-proj-"),
    (OPENAI_SVC, "sk-svcacct-"),
    (OPENAI_ADMIN, "sk-admin-"),
    (ANTHROPIC, "sk-ant-"),
    (AWS_ID, "AKIA"),
    (AWS_STS_ID, "ASIA"),
    (GOOGLE, "AIza"),
    *[(t, t[:4]) for t in GH_TOKENS],
    (GH_PAT, "github_pat_"),
    *[(t, t[:5]) for t in SLACK],
    *[(t, t[:8]) for t in STRIPE],
    (JWT, "eyJ"),
]

CONTEXTS = [
    "{}",
    "my key is {} thanks",
    'json: {{"key": "{}"}}',
    "https://api.example.com/v1/x?key={}&page=2",
    "X-Custom: {}\r\n",
    "({})",
    # An assignment whose value is a known key: the key's own mask, nothing left over.
    "OPENAI_API_KEY={}",
    "token: {}\n",
    "api_key = {}, next",
]


@pytest.mark.parametrize(("secret", "prefix"), TOKEN_CASES, ids=lambda v: str(v)[:12])
@pytest.mark.parametrize("template", CONTEXTS)
def test_token_true_positive(secret: str, prefix: str, template: str) -> None:
    text = template.format(secret)
    out = redact_text(text)
    assert secret not in out
    assert f"{prefix}…{MASK}" in out
    assert "]]" not in out
    # Nothing of the secret beyond its family prefix leaks.
    body = secret[len(prefix) :]
    assert body[:6] not in out.replace(f"{prefix}…{MASK}", "")


def test_mask_form_is_exact() -> None:
    assert redact_text(f"k={OPENAI_PROJ}") == "k=sk-proj-…[REDACTED]"
    assert redact_text(ANTHROPIC) == "sk-ant-…[REDACTED]"
    assert redact_text(AWS_ID) == "AKIA…[REDACTED]"


@pytest.mark.parametrize(
    "text",
    [
        "task-list",
        "risk-free investment",
        "a disk-based cache",
        "sk-learn-compatible-estimators",
        "sk-abcdefghijklmnopqrstuvwxyz",  # no digits: a word, not a key
        "sk-123",  # too short
        "sk_live_short",
        "123e4567-e89b-12d3-a456-426614174000",
        "commit 3f786850e387550fdab836ed7e6dc881de23001b",
        "aGVsbG8gd29ybGQsIHRoaXMgaXMgb3JkaW5hcnkgZGF0YQ==",
        "the AKIA prefix alone",
        "AKIAIOSFODNN7EXAMPL",  # 15 chars after AKIA
        "AIza is how Google keys start",
        "ghp_short",
        "github_pat_",
        "xoxb-123",
        "eyJhbGciOiJIUzI1NiJ9 alone",
        "Bearer",
        "The Bearer of bad news",
        "Bearer tokens are described in RFC 6750",
        "bearer authentication",
        "Basic auth is weak",
        "max_tokens=100",
        "max_token=100",
        "tokens: 512",
        "the password is required",
        "passwords must match",
        "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
        "-----BEGIN PUBLIC KEY-----\nMIIB\n-----END PUBLIC KEY-----",
        "",
    ],
)
def test_false_positive_untouched(text: str) -> None:
    assert redact_text(text) == text


@pytest.mark.parametrize(
    "header",
    [
        f"Authorization: Bearer {BEARER}",
        f"authorization: bearer {BEARER}",
        f'{{"Authorization": "Bearer {BEARER}"}}',
        f"curl -H 'Authorization: Bearer {BEARER}' https://x",
        f"Bearer {JWT}",
    ],
)
def test_bearer_keeps_the_word(header: str) -> None:
    out = redact_text(header)
    assert BEARER not in out
    assert JWT not in out
    assert re.search(r"(?i)bearer …\[REDACTED\]|bearer eyJ…\[REDACTED\]", out)


@pytest.mark.parametrize(
    "header",
    [
        f"Authorization: Basic {BASIC}",
        f'{{"Authorization": "Basic {BASIC}"}}',
        f"authorization=basic {BASIC}",
    ],
)
def test_basic_auth(header: str) -> None:
    out = redact_text(header)
    assert BASIC not in out
    assert MASK in out


@pytest.mark.parametrize(
    "text",
    [
        f"aws_secret_access_key={AWS_SECRET}",
        f"AWS_SECRET_ACCESS_KEY = {AWS_SECRET}",
        f'{{"aws_secret_access_key": "{AWS_SECRET}"}}',
        f"[default]\naws_access_key_id = {AWS_ID}\naws_secret_access_key = {AWS_SECRET}\n",
    ],
)
def test_aws_secret_assignment(text: str) -> None:
    out = redact_text(text)
    assert AWS_SECRET not in out
    assert AWS_ID not in out
    assert "aws_secret_access_key" in out.lower()


def test_aws_secret_shape_alone_is_not_masked() -> None:
    # 40 base64 characters without the assignment could be anything.
    assert redact_text(AWS_SECRET) == AWS_SECRET


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("api_key=abcd1234 next", "api_key=[REDACTED] next"),
        ("API-KEY: abcd1234", "API-KEY: [REDACTED]"),
        ("x-api-key: abcd1234", "x-api-key: [REDACTED]"),
        ('{"apiKey": "my secret value"}', '{"apiKey": "[REDACTED]"}'),
        ("{'password': 'hunter22'}", "{'password': '[REDACTED]'}"),
        ("password=hunter2&user=bob", "password=[REDACTED]&user=bob"),
        (
            "https://x.io/cb?access_token=abc123&state=1",
            "https://x.io/cb?access_token=[REDACTED]&state=1",
        ),
        ("client_secret: 'shh-123'", "client_secret: '[REDACTED]'"),
        ("DB_PASSWORD=pa55word", "DB_PASSWORD=[REDACTED]"),
    ],
)
def test_generic_assignment(text: str, expected: str) -> None:
    assert redact_text(text) == expected


def test_generic_assignment_keeps_family_prefix_already_masked() -> None:
    assert redact_text(f'{{"apiKey": "{OPENAI_PROJ}"}}') == '{"apiKey": "sk-proj-…[REDACTED]"}'


@pytest.mark.parametrize("label", ["", "RSA ", "EC ", "OPENSSH ", "ENCRYPTED "])
def test_private_key_blocks(label: str) -> None:
    body = "MIIEowIBAAKCAQEA7x9\nq2Zk+/abc=\n"
    text = (
        f"before\n-----BEGIN {label}PRIVATE KEY-----\n{body}-----END {label}PRIVATE KEY-----\nafter"
    )
    out = redact_text(text)
    assert "MIIEow" not in out
    assert out == f"before\n-----BEGIN {label}PRIVATE KEY-----…{MASK}\nafter"


def test_unterminated_private_key_masks_the_body() -> None:
    out = redact_text("-----BEGIN PRIVATE KEY-----\nMIIEowIBAAKCAQEA7x9\nq2Zk+/abc=\n")
    assert "MIIEow" not in out


def test_private_key_in_json_string() -> None:
    value = "-----BEGIN PRIVATE KEY-----\\nMIIEowIBAAK\\n-----END PRIVATE KEY-----\\n"
    out = redact_text(json.dumps({"key": value}))
    assert "MIIEowIBAAK" not in out


def test_literal_secrets_and_extra() -> None:
    credential = "c0rrect-h0rse-battery"
    text = f"using {credential} now, again {credential}"
    assert redact_text(text, extra=[credential]) == f"using {MASK} now, again {MASK}"
    redactor = Redactor(secrets=(credential,))
    assert credential not in redactor.redact(text)
    assert redactor.with_secrets("another-one").redact("x another-one") == f"x {MASK}"


def test_literal_secret_too_short_is_config_error() -> None:
    with pytest.raises(ConfigError):
        Redactor(secrets=("abc",))


def test_extra_patterns_and_secret_group() -> None:
    redactor = Redactor(patterns=(r"ACME-\d{6}", re.compile(r"pin (?P<secret>\d{4})")))
    assert redactor.redact("id ACME-123456 pin 1234") == f"id {MASK} pin {MASK}"
    with pytest.raises(ConfigError):
        Redactor(patterns=("(",))


def test_builtin_off() -> None:
    assert Redactor(builtin=False).redact(OPENAI_PROJ) == OPENAI_PROJ


def test_redact_value_nested() -> None:
    data = {
        "headers": {"Authorization": f"Bearer {BEARER}", "X-Trace": "abc"},
        "password": "hunter22",
        "apiKey": 12345678,
        "messages": [
            {"role": "user", "content": f"my key is {OPENAI_PROJ}"},
            ("tuple", GOOGLE),
        ],
        OPENAI_LEGACY: "key used as a dict key",
        "tags": {"a", AWS_ID},
        "count": 3,
        "none": None,
    }
    out = redact_value(data)
    dumped = repr(out)
    for secret in (BEARER, "hunter22", "12345678", OPENAI_PROJ, GOOGLE, OPENAI_LEGACY, AWS_ID):
        assert secret not in dumped
    assert out["headers"]["X-Trace"] == "abc"
    assert out["headers"]["Authorization"] == MASK
    assert out["password"] == MASK
    assert isinstance(out["messages"][1], tuple)
    assert out["count"] == 3
    assert out["none"] is None
    assert "sk-…[REDACTED]" in out
    assert data["password"] == "hunter22"  # the input is not modified


def test_redact_value_depth_bounded() -> None:
    deep: list[object] = [OPENAI_PROJ]
    for _ in range(100):
        deep = [deep]
    out = redact_value(deep, redactor=Redactor(max_depth=10))
    assert OPENAI_PROJ not in repr(out)
    assert "too deep" in repr(out)


def test_redact_value_cycle_terminates() -> None:
    cyclic: list[object] = []
    cyclic.append(cyclic)
    assert "too deep" in repr(redact_value(cyclic))


def test_default_instance_is_shared_config() -> None:
    assert redact_value("x", redactor=DEFAULT_REDACTOR) == "x"
    with pytest.raises(AttributeError):
        DEFAULT_REDACTOR.builtin = False  # type: ignore[misc]  # frozen: the point of the test


def test_sha256_text() -> None:
    assert sha256_text("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert sha256_text("é") == hashlib.sha256("é".encode()).hexdigest()


ADVERSARIAL = [
    "sk-" * 350_000,
    "sk-proj-" + "a" * 1_000_000,
    "a" * 1_000_000,
    "eyJ" * 350_000,
    "eyJa." * 200_000,
    "-----BEGIN PRIVATE KEY-----" * 40_000,
    "-----BEGIN PRIVATE KEY-----\n" + "A" * 1_000_000,
    "password=" * 120_000,
    'password: "' * 100_000,
    "Bearer " * 150_000,
    "Authorization: Basic " * 50_000,
    "AKIA" * 250_000,
    "ghp_" * 250_000,
    ("x" * 10 + " ") * 100_000,
    "aws_secret_access_key=" * 45_000,
]


@pytest.mark.parametrize("text", ADVERSARIAL, ids=lambda t: t[:14])
def test_linear_time_on_adversarial_megabyte(text: str) -> None:
    start = time.process_time()
    redact_text(text)
    # Linear rules take well under a second per megabyte; a backtracking rule would take
    # minutes. CPU time of this process, so load from other processes does not count.
    assert time.process_time() - start < 5.0


SHAPES = [OPENAI_PROJ, ANTHROPIC, AWS_ID, GOOGLE, GH_PAT, JWT, *STRIPE[:1], "hunter2-Secret9"]
FRAMES = [
    "{}",
    "password: {}",
    "api_key={}",
    '"apiKey": "{}"',
    "Authorization: Bearer {}",
    "x {} y",
]


@given(
    st.lists(st.tuples(st.sampled_from(FRAMES), st.sampled_from(SHAPES)), min_size=1, max_size=4),
    st.sampled_from(["\n", " ", ", "]),
)
def test_masking_twice_changes_nothing(parts: list[tuple[str, str]], sep: str) -> None:
    redactor = DEFAULT_REDACTOR.with_secrets("hunter2-Secret9")
    text = sep.join(frame.format(secret) for frame, secret in parts)
    once = redactor.redact(text)
    assert redactor.redact(once) == once
    assert "]]" not in once.replace(MASK + "]", "")


def test_an_already_masked_assignment_is_left_alone() -> None:
    assert DEFAULT_REDACTOR.redact(f"password: {MASK}") == f"password: {MASK}"
    literal = Redactor(secrets=("host-only-secret-7f3a9c",))
    assert literal.redact("token: host-only-secret-7f3a9c") == f"token: {MASK}"
