"""Every built-in rule, gitleaks-style: samples it must mask and samples it must leave.

``RULES`` maps a rule name to its true positives — ``(text, body)``: ``body`` is what must
vanish (everything after the kept family prefix, or the assigned value) — and its false
positives, which the default redactor must return unchanged. Then the shapes that used
to escape: keys glued to a word or after an escaped newline, double-encoded JSON,
cuts that fall inside a key, PEM blocks whose END is past the cut.
"""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from opsrun._redact import DEFAULT_REDACTOR, MASK, Redactor
from opsrun._redact_rules import BUILTIN_RULES, apply_rules, plan_rules
from opsrun.errors import OpsrunError, bound_details, bound_text
from test_redact import (
    ANTHROPIC,
    AWS_ID,
    AWS_SECRET,
    AWS_STS_ID,
    BASIC,
    BEARER,
    GH_PAT,
    GH_TOKENS,
    GOOGLE,
    JWT,
    OPENAI_ADMIN,
    OPENAI_LEGACY,
    OPENAI_PROJ,
    OPENAI_SVC,
    SLACK,
    STRIPE,
)

# Fake values in real shapes, assembled from parts so scanners do not flag this file.
HEX32 = "0123456789abcdef" + "fedcba9876543210"
RAND36 = "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
OPENROUTER = "sk-or-v1-" + HEX32 * 2
XAI = "xai-" + RAND36 * 2 + "AbCdEfGh"
WHSEC = "whsec_" + "MfKQ9r8GKYqrTwjUPD8I" + "LPZIo2LaLaSw"
GITLAB = "glpat-" + "xV8bN2cK9dL4mQ7rT1sW"
SLACK_APP = "xapp-1-A0123456789-" + "1234567890123-abcdef0123456789abcdef"
SLACK_HOOK = (
    "https://hooks.slack.com/services/" + "T0A1B2C3D/B4E5F6G7H/" + "aBcDeFgHiJkLmNoPqRsTuVwX"
)
YA29 = "ya29." + "a0AfH6SMBx3Kq9Lr2Tp7Vw1Yz4Bc6De8Fg0Hi"
GOCSPX = "GOCSPX-" + "1a2B3c4D5e6F7g8H9i0J1k2L3m4N"
HF = "hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ" + "aBcDeFgH"
SENDGRID = "SG." + "ngeVfQFYQlKU0ufo8x5d1A" + "." + "TwL2iGABf9DHoTf-09kqeF8tAmbihYzrnopKc-1s5cr"
NPM = "npm_" + RAND36
PYPI = "pypi-" + "AgEIcHlwaS5vcmc" + "CJDk3ZDY1YTQxLWU0ZTctNGY0YS05YjNmLWE2ZjE5OWQwZjUxMwACKlsz"
GROQ = "gsk_" + RAND36 + "AbCdEfGh1234XyZw"
REPLICATE = "r8_" + RAND36[:37]
DIGITALOCEAN = "dop_v1_" + HEX32 * 2
SHOPIFY = ["shp" + kind + "_" + HEX32 for kind in ("at", "ca", "pa", "ss")]
TWILIO_KEY = "SK" + HEX32
TWILIO_SID = "AC" + HEX32
TWILIO_TOKEN = "9f8e7d6c5b4a3210" + "a1b2c3d4e5f60718"
TELEGRAM_ID = "123456789:"
TELEGRAM = TELEGRAM_ID + "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsawq"
DATABRICKS = "dapi" + HEX32
AZURE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50u" + "SRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
AZURE_SIG = "s2Fk%2BbGxFqT9Vw3Yz1Lr7Kp4Nm6Hj8Gd0Cx5Bv2Az" + "%3D"
PASSWORD = "s3cr3t-Pa55word"

TokenSamples = list[tuple[str, str]]


def token(secret: str, prefix: str) -> tuple[str, str]:
    """A key alone: ``prefix`` may survive, the rest must not."""
    return secret, secret[len(prefix) :]


RULES: dict[str, tuple[TokenSamples, list[str]]] = {
    "anthropic": (
        [token(ANTHROPIC, "sk-ant-")],
        ["sk-ant-colony-simulation-framework", "sk-ant-short"],
    ),
    "openrouter": ([token(OPENROUTER, "sk-or-v1-")], ["sk-or-v1-not-a-hex-key-at-all"]),
    "openai-project": (
        [
            token(OPENAI_PROJ, "sk-proj-"),
            token(OPENAI_SVC, "sk-svcacct-"),
            token(OPENAI_ADMIN, "sk-admin-"),
        ],
        ["sk-proj-management-guidelines-draft-version"],
    ),
    "openai-legacy": (
        [token(OPENAI_LEGACY, "sk-")],
        [
            "task-list",
            "risk-free investment",
            "sk-abcdefghijklmnopqrstuvwxyz",
            "a risk-assessment2023report",  # glued to a word and not random enough
        ],
    ),
    "xai": ([token(XAI, "xai-")], ["xai-grok-announcement-blog-post", "xai-" + "a" * 60]),
    "stripe": (
        [*(token(s, s[:8]) for s in STRIPE), token(WHSEC, "whsec_")],
        ["sk_live_short", "whsec_ handler"],
    ),
    "github": ([token(t, t[:4]) for t in GH_TOKENS], ["ghp_short", "ghp_ prefix"]),
    "github-fine-grained": ([token(GH_PAT, "github_pat_")], ["github_pat_", "github_pat_short"]),
    "gitlab": ([token(GITLAB, "glpat-")], ["glpat-example-token-here-docs", "glpat-short"]),
    "slack": (
        [*(token(t, t[:5]) for t in SLACK), token(SLACK_APP, "xapp-")],
        ["xoxb-123", "xapp-1"],
    ),
    "slack-webhook": (
        [token(SLACK_HOOK, "https://hooks.slack.com/services/")],
        ["https://hooks.slack.com/services/", "see hooks.slack.com/services/ docs"],
    ),
    "google-api-key": ([token(GOOGLE, "AIza")], ["AIza is how Google keys start"]),
    "google-oauth-token": (
        [token(YA29, "ya29.")],
        ["ya29.example", "ya29.abcdefghijklmnopqrstuvwxyz"],
    ),
    "google-client-secret": ([token(GOCSPX, "GOCSPX-")], ["GOCSPX-", "GOCSPX-short"]),
    "aws-access-key-id": (
        [token(AWS_ID, "AKIA"), token(AWS_STS_ID, "ASIA")],
        ["the AKIA prefix alone", "AKIAIOSFODNN7EXAMPL", "AKIAIOSFODNN7EXAMPLEX"],
    ),
    "jwt": (
        [token(JWT, "eyJ")],
        [
            "eyJhbGciOiJIUzI1NiJ9 alone",
            "com.example.monkeyJumperService.abcdefghij.klmnopqrst",
            "eyJhbGciOiJIUzI1NiJ9.short.x",
        ],
    ),
    "huggingface": (
        [token(HF, "hf_")],
        ["hf_hub_download", "hf_abcdefghijklmnopqrstuvwxyzabcdefgh", "pdf_reader"],
    ),
    "sendgrid": ([token(SENDGRID, "SG.")], ["SG.short.value", "MSG.body"]),
    "npm": ([token(NPM, "npm_")], ["npm_config_registry", "npm_" + "a" * 40]),
    "pypi": ([token(PYPI, "pypi-")], ["pypi-package-name", "pypi-AgE"]),
    "groq": ([token(GROQ, "gsk_")], ["gsk_cluster_name", "gsk_" + "b" * 50]),
    "replicate": ([token(REPLICATE, "r8_")], ["r8_plain", "var8_" + "x" * 40]),
    "digitalocean": ([token(DIGITALOCEAN, "dop_v1_")], ["dop_v1_short", "dop_v1_" + "z" * 64]),
    "shopify": ([token(t, t[:6]) for t in SHOPIFY], ["shpat_", "shpat_short"]),
    "twilio-api-key": (
        [token(TWILIO_KEY, "SK")],
        ["TASK" + HEX32, "SK" + "a" * 32, "SKIP the step"],
    ),
    "twilio-auth-token": (
        [(f"{TWILIO_SID}:{TWILIO_TOKEN}", TWILIO_TOKEN)],
        [TWILIO_SID, f"account {TWILIO_SID}"],
    ),
    "telegram-bot-token": (
        [token(TELEGRAM, TELEGRAM_ID)],
        ["12:30", "123456789:AB", "at 123456789:AAshort"],
    ),
    "databricks": ([token(DATABRICKS, "dapi")], ["dapi is an API", "dapi" + "g" * 32]),
    "url-credentials": (
        [
            (f"postgres://admin:{PASSWORD}@db.internal:5432/app", PASSWORD),
            (f"postgresql://app:{PASSWORD}@10.0.0.5/app?sslmode=require", PASSWORD),
            (f"mysql://root:{PASSWORD}@localhost/db", PASSWORD),
            (f"mongodb+srv://app:{PASSWORD}@cluster0.mongodb.net/x", PASSWORD),
            (f"redis://:{PASSWORD}@cache:6379/0", PASSWORD),
            (f"https://deploy:{PASSWORD}@git.example.com/repo.git", PASSWORD),
            (f"amqp://guest:{PASSWORD}@mq:5672/", PASSWORD),
        ],
        [
            "https://example.com:8443/path",
            "http://localhost:8080/?mail=a@b.com",
            "ssh://git@github.com/org/repo",
            "postgres://localhost/app",
        ],
    ),
    "azure-sas-signature": (
        [(f"https://a.blob.core.windows.net/c/b?sv=2022-11-02&se=2030&sig={AZURE_SIG}", AZURE_SIG)],
        ["sig=short", "design=something-longer-than-sixteen"],
    ),
    "aws-secret-access-key": (
        [(f"aws_secret_access_key={AWS_SECRET}", AWS_SECRET)],
        [AWS_SECRET],
    ),
    "basic-auth": ([(f"Authorization: Basic {BASIC}", BASIC)], ["Basic auth is weak"]),
    "bearer": (
        [(f"Authorization: Bearer {BEARER}", BEARER)],
        ["The Bearer of bad news", "Bearer tokens are described in RFC 6750"],
    ),
    "netrc": (
        [
            (f"machine api.example.com login alice password {PASSWORD}", PASSWORD),
            (f"machine h\n  login bob\n  password {PASSWORD}\n", PASSWORD),
            (f"default login bob password {PASSWORD}", PASSWORD),
        ],
        ["machine learning is fun", "the password is required", "default password policy"],
    ),
    "passphrase": (
        [
            ("passphrase: correct horse battery staple", "correct horse battery staple"),
            ("GPG_PASSPHRASE=correct horse battery staple", "correct horse battery staple"),
        ],
        ["the passphrase is long", "passphrase:"],
    ),
    "cookie": (
        [
            ("Cookie: session=a1b2c3d4e5f6; theme=dark", "session=a1b2c3d4e5f6; theme=dark"),
            ("Set-Cookie: sid=z9y8x7w6v5u4; Path=/; HttpOnly", "sid=z9y8x7w6v5u4"),
            ('{"cookie": "sid=z9y8x7w6v5u4"}', "z9y8x7w6v5u4"),
        ],
        ["cookie: chocolate chip", "cookies are tasty", "Cookie: "],
    ),
    "assignment": (
        [
            (f"password={PASSWORD}", PASSWORD),
            (f'{{"apiKey": "{PASSWORD}"}}', PASSWORD),
            (f"DB_PASSWORD={PASSWORD}", PASSWORD),
            (f"AccountName=acct;AccountKey={AZURE_KEY};EndpointSuffix=x", AZURE_KEY),
            (f"Endpoint=sb://x/;SharedAccessKey={AZURE_KEY}", AZURE_KEY),
            (f'{{"SecretAccessKey": "{AWS_SECRET}"}}', AWS_SECRET),
            ('{"SessionToken": "FwoGZXIvYXdzEJr//////////wEaDMqx7"}', "FwoGZXIvYXdzEJr"),
            ("AWS_SESSION_TOKEN=FwoGZXIvYXdzEJr//////////wEaDMqx7", "FwoGZXIvYXdzEJr"),
            ("refresh_token: 'r3fr3sh-t0ken-value'", "r3fr3sh-t0ken-value"),
            ("{'password': \"it's-a-s3cret\"}", "it's-a-s3cret"),
            ("password=" + "x" * 2000, "x" * 2000),
            # A quote or closing bracket inside a bare value does not end it.
            ("password=it's-a-secret-9Kq", "it's-a-secret-9Kq"),
            ("api_key=abc123)def456ghi", "abc123)def456ghi"),
            ("token=Tr0ub4>dor]3xQz9}k", "Tr0ub4>dor]3xQz9}k"),
        ],
        [
            "max_tokens=100",
            "max_token=100",
            "tokens: 512",
            "passwords must match",
            "password: ",
            "password=get(x).strip()",
            "def connect(password: str) -> None:",
            "self.token: str | None = None",
            "interface Login { password: string; }",
        ],
    ),
}


def fragments(body: str, size: int = 8) -> set[str]:
    return {body[i : i + size] for i in range(max(1, len(body) - size + 1))}


def assert_masked(out: str, body: str) -> None:
    assert body not in out
    leaked = [f for f in fragments(body) if f in out]
    assert leaked == [], f"fragments of the secret survived: {leaked[:3]} in {out!r}"


BY_NAME = {rule.name: rule for rule in BUILTIN_RULES}
POSITIVES = [(name, text, body) for name, (tps, _) in RULES.items() for text, body in tps]
NEGATIVES = [(name, text) for name, (_, fps) in RULES.items() for text in fps]


def test_every_rule_has_samples() -> None:
    assert set(RULES) == set(BY_NAME)
    for name, (tps, fps) in RULES.items():
        assert tps, name
        assert fps, name


@pytest.mark.parametrize(("name", "text", "body"), POSITIVES, ids=lambda v: str(v)[:24])
def test_true_positive(name: str, text: str, body: str) -> None:
    # The rule named masks the sample on its own, and so does the whole rule set.
    assert_masked(apply_rules(text, plan_rules((BY_NAME[name],))), body)
    out = DEFAULT_REDACTOR.redact(text)
    assert_masked(out, body)
    assert MASK in out


@pytest.mark.parametrize(("name", "text"), NEGATIVES, ids=lambda v: str(v)[:24])
def test_false_positive(name: str, text: str) -> None:
    assert DEFAULT_REDACTOR.redact(text) == text


def test_mask_keeps_the_family_prefix_only() -> None:
    assert DEFAULT_REDACTOR.redact(OPENROUTER) == f"sk-or-v1-…{MASK}"
    assert DEFAULT_REDACTOR.redact(HF) == f"hf_…{MASK}"
    assert DEFAULT_REDACTOR.redact(TELEGRAM) == f"{TELEGRAM_ID}…{MASK}"
    assert DEFAULT_REDACTOR.redact(f"redis://:{PASSWORD}@h") == f"redis://:{MASK}@h"
    assert DEFAULT_REDACTOR.redact("Cookie: a=b; c=d") == f"Cookie: {MASK}"


# Token families (a kept prefix): a key glued to a word is still masked.
TOKEN_FAMILIES = {
    "anthropic", "openrouter", "openai-project", "openai-legacy", "xai", "stripe", "github",
    "github-fine-grained", "gitlab", "slack", "google-api-key", "google-oauth-token",
    "google-client-secret", "aws-access-key-id", "jwt", "huggingface", "sendgrid", "npm",
    "pypi", "groq", "replicate", "digitalocean", "shopify", "databricks",
}  # fmt: skip
GLUED = [p for p in POSITIVES if p[0] in TOKEN_FAMILIES]
ESCAPED = POSITIVES


@pytest.mark.parametrize(("name", "text", "body"), GLUED, ids=lambda v: str(v)[:24])
@pytest.mark.parametrize("before", ["x", "7", "_", "key", "MODE=dev"])
def test_key_glued_to_a_word(name: str, text: str, body: str, before: str) -> None:
    assert_masked(DEFAULT_REDACTOR.redact(before + text), body)


@pytest.mark.parametrize(("name", "text", "body"), ESCAPED, ids=lambda v: str(v)[:24])
def test_key_after_an_escape(name: str, text: str, body: str) -> None:
    for shape in (
        json.dumps({"env": "MODE=dev\n" + text}),
        json.dumps({"env": "a\tb\r\n" + text + "\nnext"}),
        repr({"env": "MODE=dev\n" + text}),
        json.dumps(json.dumps({"env": "MODE=dev\n" + text})),
    ):
        assert_masked(DEFAULT_REDACTOR.redact(shape), body)


def test_the_reported_shapes() -> None:
    cfg = {"env": "MODE=dev\n" + OPENAI_PROJ}
    message = str(ValueError(f"bad config {cfg!r}"))
    assert_masked(DEFAULT_REDACTOR.redact(message), OPENAI_PROJ[8:])
    preview = json.dumps({"env": "MODE=dev\n" + OPENAI_PROJ})
    assert_masked(DEFAULT_REDACTOR.redact(preview), OPENAI_PROJ[8:])


@pytest.mark.parametrize("key", ["password", "refresh_token", "apiKey", "client_secret"])
def test_double_encoded_json_assignment(key: str) -> None:
    once = json.dumps({key: PASSWORD, "user": "bob"})
    for text in (json.dumps(once), json.dumps(json.dumps(once))):
        out = DEFAULT_REDACTOR.redact(text)
        assert_masked(out, PASSWORD)
        assert "bob" in out


PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIBOgIBAAJBAKj34GkxFhD90vcNLYLInFEX6Ppy1tPf9Cnzj4p4WGeKLs1Pt8Qu\n"
    "KUpRKfFLfRYC9AIKjbJTWit+CqvjWYzvQwECAwEAAQ==\n"
    "-----END RSA PRIVATE KEY-----\n"
)
PGP = (
    "-----BEGIN PGP PRIVATE KEY BLOCK-----\n"
    "Version: GnuPG v2\n\n"
    "lQOYBF0Jg1YBCADBl2sJkS7yF6oE1a4Qkq9nXc+3LxZ2Tg8pP0WuRvYbHk5mCd\n"
    "=Ab1c\n"
    "-----END PGP PRIVATE KEY BLOCK-----\n"
)
PEM_BODY = ["MIIBOgIBAAJBAKj34Gkx", "KUpRKfFLfRYC9AIKjbJT"]
PGP_BODY = ["lQOYBF0Jg1YBCADBl2sJ"]


@pytest.mark.parametrize(("block", "body"), [(PEM, PEM_BODY), (PGP, PGP_BODY)])
def test_private_key_blocks_whole_escaped_and_cut(block: str, body: list[str]) -> None:
    shapes = [block, json.dumps({"key": block}), json.dumps(json.dumps({"key": block}))]
    for text in shapes:
        out = DEFAULT_REDACTOR.redact(text)
        assert all(part not in out for part in body)
        assert "PRIVATE KEY" in out
        # Cut anywhere after the BEGIN line: the END line is gone, the body still goes.
        begin = text.index("PRIVATE KEY") + 20
        for cut in range(begin, len(text), 7):
            cut_out = bound_text("x" * 2000 + text, 2000 + cut)
            assert all(part[:8] not in cut_out[2000:] for part in body), cut


def test_cut_inside_a_key_keeps_no_half() -> None:
    key = "ghp_" + "Zx9Qw8Er7Ty6Ui5" + "a1B2" * 6
    message = "x" * 1010 + key + " tail"
    out = bound_text(message)
    assert len(out) <= 1024
    assert "Zx9Qw8Er" not in out
    details = bound_details({"m": message, "deep": [{"m": message}]})
    assert "Zx9Qw8Er" not in json.dumps(details)
    assert "Zx9Qw8Er" not in json.dumps(OpsrunError("x", details={"m": message}).details)


def test_bound_with_a_redactor_masks_host_secrets_before_the_cut() -> None:
    host = "tenant-4f9a-internal-signing-secret"
    redactor = Redactor(secrets=(host,))
    for cut in range(1000, 1040):
        out = bound_text("y" * 1000 + host + " end", cut, redactor=redactor)
        assert_masked(out, host)
    details = bound_details({"m": "y" * 1010 + host, "password": "pw-123456"}, redactor=redactor)
    assert details["password"] == MASK
    assert_masked(json.dumps(details), host)

    class Loud:
        def __repr__(self) -> str:
            return f"<Loud {host}>"

    assert_masked(json.dumps(bound_details({"v": Loud()}, redactor=redactor)), host)


def test_short_text_is_cut_only_when_needed() -> None:
    assert bound_text("hello", 10) == "hello"
    assert bound_text("hello world", 5) == "hello"
    assert bound_details({"a": "b"}) == {"a": "b"}


# Properties: any family, anywhere, any cut.
TOKENS = [(text, body) for _, text, body in GLUED]
FILLER = st.text(alphabet="abcXYZ019 _-\\n\"'{}:,=", max_size=40)
AFTER = st.sampled_from([" ", "\n", "\\n", '"', "'", ",", "}", ""])


@given(st.sampled_from(TOKENS), FILLER, AFTER, FILLER)
def test_an_embedded_key_never_survives(
    sample: tuple[str, str], before: str, after: str, rest: str
) -> None:
    text, body = sample
    if after == "" and rest[:1].isalnum():
        rest = " " + rest
    whole = before + text + after + rest
    for shape in (whole, json.dumps({"k": whole}), json.dumps(json.dumps({"k": whole}))):
        out = DEFAULT_REDACTOR.redact(shape)
        assert_masked(out, body)
        assert DEFAULT_REDACTOR.redact(out) == out


@given(st.sampled_from(POSITIVES), st.integers(min_value=0, max_value=200), st.data())
def test_no_cut_of_bound_text_leaves_a_fragment(
    sample: tuple[str, str, str], pad: int, data: st.DataObject
) -> None:
    _, text, body = sample
    message = "w " * pad + text + " and then some"
    limit = data.draw(st.integers(min_value=1, max_value=len(message) - 1))
    out = bound_text(message, limit)
    assert len(out) <= limit
    assert [f for f in fragments(body) if f in out] == []
    # What a run records: bounded, then masked with its redactor.
    assert [f for f in fragments(body) if f in DEFAULT_REDACTOR.redact(out)] == []


@given(st.lists(st.sampled_from([t for _, t, _ in POSITIVES] + ["plain", "x\\n"]), max_size=5))
def test_masking_is_idempotent(parts: list[str]) -> None:
    once = DEFAULT_REDACTOR.redact(" ".join(parts))
    assert DEFAULT_REDACTOR.redact(once) == once


ADVERSARIAL = [
    "xsk-proj-" * 120_000,
    "eyJ" * 350_000,
    "aeyJ" + "aeyJ" * 250_000,
    ("eyJaaaaaaaaa." * 80_000),
    "a://" * 250_000,
    "https://u:" + "p" * 1_000_000,
    "https://" + "u:" * 500_000,
    "sig=" * 250_000,
    "machine " * 125_000,
    "machine h login u " * 50_000,
    "Cookie: " * 125_000,
    "cookie: a=" * 100_000,
    "passphrase: " * 80_000,
    '{\\"password\\": \\"' * 60_000,
    'password: "\\\\\\\\' * 100_000,
    "123456789:" * 100_000,
    "SK" * 500_000,
    "AC" + "0" * 32 + ":" * 500_000,
    "hf_" * 300_000,
    "-----BEGIN PGP PRIVATE KEY BLOCK-----\\n" + "A" * 1_000_000,
]


@pytest.mark.parametrize("text", ADVERSARIAL, ids=lambda t: t[:14])
def test_new_rules_stay_linear_on_adversarial_megabytes(text: str) -> None:
    start = time.process_time()
    DEFAULT_REDACTOR.redact(text)
    assert time.process_time() - start < 5.0
