"""The redactor on a corpus: every secret shape is removed (and marked), ordinary code comes back unchanged."""

import pytest

from instrumentation.redaction import looks_random, redact, shannon_entropy

# (case id, text containing the secret, the secret substring that must not survive). Every value is fake.
SECRETS = [
    ("aws_access_key_id", 'aws_access_key_id = AKIAIOSFODNN7EXAMPLE\nregion = us-east-1', "AKIAIOSFODNN7EXAMPLE"),
    ("aws_secret_in_ini", "[default]\naws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n",
     "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    ("aws_sts_key_in_prose", "the failing call used ASIAY34FZKBOKMUTVV7A as the key id",
     "ASIAY34FZKBOKMUTVV7A"),
    ("github_classic_pat", "git clone https://ghp_R8tYv2LqX9mN4bK7wE1sD3fG6hJ0kL5pQzA2@github.com/o/r.git",
     "ghp_R8tYv2LqX9mN4bK7wE1sD3fG6hJ0kL5pQzA2"),
    ("github_oauth_token", "GITHUB_TOKEN: gho_16C7e42F292c6912E7710c838347Ae178B4a", "gho_16C7e42F292c6912E7710c838347Ae178B4a"),
    ("github_app_token", "Using token ghs_abCDefGHijKLmnOPqrSTuvWXyz0123456789 for the action",
     "ghs_abCDefGHijKLmnOPqrSTuvWXyz0123456789"),
    ("github_fine_grained_pat", "export GH_PAT=github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJ",
     "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"),
    ("gitlab_pat", 'gl = gitlab.Gitlab("https://gitlab.com", private_token="glpat-x9Yz8Wv7Ut6Sr5Qp4On3")',
     "glpat-x9Yz8Wv7Ut6Sr5Qp4On3"),
    ("slack_bot_token", 'client = WebClient(token="xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx")',
     "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"),
    ("slack_webhook", "curl -X POST https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX -d '{}'",
     "T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX"),
    ("stripe_live_key", "stripe.api_key = 'sk_live_4eC39HqLyjWDarjtT1zdp7dc'", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
    ("stripe_restricted_key", "STRIPE_KEY=rk_live_51H8xYzAbCdEfGhIjKlMnOpQr", "rk_live_51H8xYzAbCdEfGhIjKlMnOpQr"),
    ("openai_legacy_key", "client = OpenAI(api_key='sk-3Fj8kL2mN9pQ4rS7tU1vW5xY6zA0bC2dE8fG4hI9jK3lM7nO')",
     "sk-3Fj8kL2mN9pQ4rS7tU1vW5xY6zA0bC2dE8fG4hI9jK3lM7nO"),
    ("openai_project_key", "my key is sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78_St90Uv-12Wx34 and it fails",
     "sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78_St90Uv-12Wx34"),
    ("anthropic_key", "ANTHROPIC_API_KEY=sk-ant-api03-Zq9X8w7V6u5T4s3R2q1P0o9N8m7L6k5J4i3H2g1F0e-AbCdEfAA",
     "sk-ant-api03-Zq9X8w7V6u5T4s3R2q1P0o9N8m7L6k5J4i3H2g1F0e-AbCdEfAA"),
    ("google_api_key", 'const firebaseConfig = { apiKey: "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY" };',
     "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY"),
    ("google_oauth_secret", '"client_secret": "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"', "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"),
    ("twilio_api_key", "twilio api:core:calls:list --api-key SK2a3b4c5d6e7f8091a2b3c4d5e6f70819",
     "SK2a3b4c5d6e7f8091a2b3c4d5e6f70819"),
    ("sendgrid_key", "sg = SendGridAPIClient('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')",
     "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"),
    ("npm_token", "//registry.npmjs.org/:_authToken=npm_aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dF3hJ5",
     "npm_aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dF3hJ5"),
    ("pypi_token", "[pypi]\nusername = __token__\npassword = pypi-AgEIcHlwaS5vcmcCJDk4ZjE2YzM1LTk5NjQtNDg0Ni1hYjQ5LTA0ZjY3\n",
     "pypi-AgEIcHlwaS5vcmcCJDk4ZjE2YzM1LTk5NjQtNDg0Ni1hYjQ5LTA0ZjY3"),
    ("huggingface_token", "huggingface-cli login --token hf_KpQrStUvWxYz0123AbCdEfGhIjKlMnOp45",
     "hf_KpQrStUvWxYz0123AbCdEfGhIjKlMnOp45"),
    ("azure_connection_string",
     "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;EndpointSuffix=core.windows.net",
     "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="),
    ("azure_sas_url", "https://acct.blob.core.windows.net/c/f.txt?sv=2022-11-02&sr=b&sig=Xz9%2Bk3Lm4Np5Qr6St7Uv8Wx9Yz0Ab1Cd2Ef3Gh4%3D",
     "Xz9%2Bk3Lm4Np5Qr6St7Uv8Wx9Yz0Ab1Cd2Ef3Gh4%3D"),
    ("heroku_key", "heroku config:set HEROKU_API_KEY=HRKU-AAbbCCddEEff00112233445566778899aabbccddeeff0011223344556677",
     "HRKU-AAbbCCddEEff00112233445566778899aabbccddeeff0011223344556677"),
    ("heroku_uuid_in_env", "HEROKU_API_KEY=01234567-89ab-cdef-0123-456789abcdef", "01234567-89ab-cdef-0123-456789abcdef"),
    ("digitalocean_token", 'provider "digitalocean" { token = "dop_v1_' + "a1b2c3d4e5f60718" * 4 + '" }',
     "dop_v1_" + "a1b2c3d4e5f60718" * 4),
    ("shopify_token", "X-Shopify-Access-Token: shpat_0123456789abcdef0123456789abcdef", "shpat_0123456789abcdef0123456789abcdef"),
    ("square_token", "SQUARE_ACCESS_TOKEN = sq0atp-1a2B3c4D5e6F7g8H9i0J1k", "sq0atp-1a2B3c4D5e6F7g8H9i0J1k"),
    ("mailgun_key", 'auth=("api", "key-3ax6xnjp29jd6fds4gc373sgvjxteol0")', "key-3ax6xnjp29jd6fds4gc373sgvjxteol0"),
    ("databricks_token", "databricks configure --token dapi0123456789abcdef0123456789abcdef",
     "dapi0123456789abcdef0123456789abcdef"),
    ("telegram_bot_token", "bot = Bot('1234567890:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw0')",
     "1234567890:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw0"),
    ("rsa_private_key",
     "key = '''-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7MhgHcTz6sE2I2yPB\naFDrBz9vFqU4yB5mh9l5T+Q+4jqCDmXQqfTgYg==\n-----END RSA PRIVATE KEY-----'''\n",
     "MIIEowIBAAKCAQEA0Z3VS5JJcds3xfn"),
    ("openssh_private_key_in_json",
     '{"key": "-----BEGIN OPENSSH PRIVATE KEY-----\\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\\n-----END OPENSSH PRIVATE KEY-----\\n"}',
     "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ"),
    ("truncated_private_key", "here is my key:\n-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC",
     "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"),
    ("truncated_private_key_then_prose",
     "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkq\nhkiG9w0BAQEFAASC\n\nwhy does ssh reject it?",
     "hkiG9w0BAQEFAASC"),
    ("encrypted_pem_with_headers",
     "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,8F3A\n\nMIIEowIBAAKCAQEA0Z3VS5JJcds3\n"
     "-----END RSA PRIVATE KEY-----", "MIIEowIBAAKCAQEA0Z3VS5JJcds3"),
    ("pgp_private_key_block", "x\n-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBF0Z3VS5JJcds3xfn\n=abcd\n"
     "-----END PGP PRIVATE KEY BLOCK-----\ny", "lQOYBF0Z3VS5JJcds3xfn"),
    ("url_password_postgres", 'DATABASE_URL = "postgres://app_user:Tr0ub4dor&3@db.internal:5432/app"', "Tr0ub4dor&3"),
    ("url_password_redis", "redis.from_url('redis://:s3cr3tRedisPw@cache:6379/0')", "s3cr3tRedisPw"),
    ("python_password_literal", 'conn = psycopg2.connect(host="db", user="admin", password="correct-horse-battery")',
     "correct-horse-battery"),
    ("yaml_password", "database:\n  host: db\n  PASSWORD: hunter2\n", "hunter2"),
    ("json_api_key", '{"service": "maps", "api_key": "9f8e7d6c5b4a39281706f5e4d3c2b1a0"}', "9f8e7d6c5b4a39281706f5e4d3c2b1a0"),
    ("env_secret_key", "DEBUG=1\nSECRET_KEY=django-insecure-k3y!f0r-t3st1ng\nALLOWED_HOSTS=*", "django-insecure-k3y!f0r-t3st1ng"),
    ("env_wordy_password", "DB_USER=app\nDB_PASSWORD=sunshine\n", "sunshine"),
    ("escaped_json_password", 'payload = "{\\"user\\": \\"bob\\", \\"password\\": \\"pa55word!\\"}"', "pa55word!"),
    ("go_client_secret", 'clientSecret := "Qm9vdHN0cmFwU2VjcmV0VmFsdWU"', "Qm9vdHN0cmFwU2VjcmV0VmFsdWU"),
    ("ruby_token_hash", "config.token => 'a1B2c3D4e5F6g7H8'", "a1B2c3D4e5F6g7H8"),
    ("jwt_in_prose",
     "this JWT fails to verify: eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
     "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"),
    ("bearer_header_curl", "curl -H 'Authorization: Bearer 8f14e45fceea167a5a36dedd4bea2543abc' https://api.example.com",
     "8f14e45fceea167a5a36dedd4bea2543abc"),
    ("basic_auth_header", "Authorization: Basic YWxhZGRpbjpvcGVuc2VzYW1l", "YWxhZGRpbjpvcGVuc2VzYW1l"),
    ("bearer_in_python", 'headers = {"Authorization": "Bearer abcDEF123456ghiJKL789mno"}', "abcDEF123456ghiJKL789mno"),
    ("x_api_key_header", "X-API-Key: 5up3rS3cr3tH3ad3rV4lu3", "5up3rS3cr3tH3ad3rV4lu3"),
    ("cli_password_flag", "mysql -u root --password=Sup3rS3cret db", "Sup3rS3cret"),
    ("high_entropy_assignment", 'const SIGNING_SALT = "q7Lm2Xz9Rt4Vb8Nc1Wd6Ks3Jp0";', "q7Lm2Xz9Rt4Vb8Nc1Wd6Ks3Jp0"),
    ("high_entropy_unnamed_config", "webhook:\n  verify: 'Zk8qP2vL9xR4tY7wN1mC5bJ3'\n", "Zk8qP2vL9xR4tY7wN1mC5bJ3"),
]

ORDINARY = [
    ("python_imports", "import os\nfrom pathlib import Path\nfrom transformers import AutoTokenizer\n"),
    ("password_from_call", "password = get_password()\nuser = input('user: ')"),
    ("token_count", "token_count = 5\nmax_tokens = 512\nnum_tokens: int = len(tokens)"),
    ("password_annotation", "def login(username: str, password: str, token: Optional[str] = None) -> bool:"),
    ("env_lookup", 'SECRET_KEY = os.environ["SECRET_KEY"]\napi_key = os.getenv("API_KEY", "")'),
    ("attribute_reference", "token = request.headers.get('X-Token')\nself.password = password"),
    ("js_shorthand", "const body = { username, password: password, token: accessToken };"),
    ("comparison", 'if password == confirm_password and token != "":\n    return True'),
    ("tokenizer_specials", 'tokenizer.pad_token = tokenizer.eos_token\nspecial = {"unk_token": "[UNK]", "eos_token": "</s>"}'),
    ("uuid_and_sha", 'run_id = "3f2b8c1e-9a4d-4c7e-b1f0-2d6a8e9c0b13"\ncommit = "e83c5163316f89bfbde7d9ab23ca2e25604af290"'),
    ("git_sha_in_prose", "Reverted 9fceb02d0ae598e95dc970b74767f19372d61af8 because it broke the build."),
    ("url_without_credentials", 'BASE_URL = "https://api.example.com:8443/v1/users?page=2"\nuser_at = "mailto:bob@example.com"'),
    ("url_with_user_only", "git clone ssh://git@github.com/org/repo.git"),
    ("placeholders", 'API_KEY=<your-api-key>\npassword: "${DB_PASSWORD}"\ntoken = "{{ vault_token }}"\nsecret = "xxxxxxxx"'),
    ("secret_names_not_secrets", 'secret_name = "prod/db/credentials"\npassword_hash = bcrypt.hashpw(pw, salt)\ntoken_type = "bearer"'),
    ("author_field", 'author = "Jane Doe"\nauthorization_url = "https://example.com/oauth/authorize"'),
    ("sql_placeholder", "SELECT id FROM users WHERE email = ? AND password = ?"),
    ("package_integrity",
     '"integrity": "sha512-v2kDEe57lecTulaDIuNTPy3Ry4gLGJ6Z1O3vE1krgXZNrsQ+1rDpvPWmQG5eHk6aRmbtF1iQ+6P+1mmVUKsWvA=="'),
    ("model_names", 'model_name = "meta-llama/Llama-3.1-8B-Instruct"\ndataset = "HuggingFaceH4/ultrachat_200k"'),
    ("module_path", 'handler = "myapp.handlers.payments.stripe_webhook_v2"\nversion = "2024.11.0-rc3"'),
    ("bearer_prose", "The bearer of this token gets access; use Authorization: Bearer {token} in the header."),
    ("dataclass_fields", "@dataclass\nclass Creds:\n    username: str\n    password: SecretStr\n    token: str | None = None\n"),
    ("long_identifiers", 'callback = "handleUserAuthenticationSuccessCallback"\nCONST_NAME = "DEFAULT_TIMEOUT_SECONDS_FOR_RETRY"'),
    ("shell_script", 'PASSWORD="$1"\nexport TOKEN=$(cat /run/secrets/token)\necho "done"'),
    ("css_spinner", '<div class="sk-fading-circle-spinner-container"></div>'),
    ("cli_flag_reference", "pass the value with --password-file /etc/app/pw or --token \"$TOKEN\""),
    ("pem_marker_constants",
     '_PKCS1_MARKER = ("-----BEGIN RSA PRIVATE KEY-----", "-----END RSA PRIVATE KEY-----")\n'
     'example = "-----BEGIN EC PRIVATE KEY-----\\n<key bytes>\\n-----END EC PRIVATE KEY-----"'),
    ("template_interpolation", 'msg = f"secret=\'{b64encode(self.secret).decode()}\'"\nurl = `/cb?token=${token}`'),
    ("numbers_and_dates", "timestamp = 1700000000123\ndate = '2024-11-22T02:05:00Z'\nratio = 0.123456789012345678"),
]


@pytest.mark.parametrize("case, text, secret", SECRETS, ids=[c[0] for c in SECRETS])
def test_secret_does_not_survive_and_is_marked(case, text, secret):
    out, n = redact(text)
    assert secret not in out, out
    assert "[REDACTED:" in out and n >= 1


@pytest.mark.parametrize("case, text", ORDINARY, ids=[c[0] for c in ORDINARY])
def test_ordinary_code_comes_back_unchanged(case, text):
    assert redact(text) == (text, 0)


def test_corpus_has_at_least_thirty_secret_shapes_and_fifteen_ordinary_snippets():
    assert len({c[0] for c in SECRETS}) >= 30 and len({c[0] for c in ORDINARY}) >= 15


def test_marker_names_the_kind_of_secret():
    assert redact("key AKIAIOSFODNN7EXAMPLE")[0] == "key [REDACTED:aws_access_key_id]"
    assert redact("x = 'ghp_R8tYv2LqX9mN4bK7wE1sD3fG6hJ0kL5pQzA2'")[0] == "x = '[REDACTED:github_token]'"


def test_url_password_keeps_user_and_host():
    out, n = redact("postgres://admin:hunter2x@db.internal:5432/app")
    assert out == "postgres://admin:[REDACTED:url_password]@db.internal:5432/app" and n == 1


def test_assignment_keeps_key_and_quotes():
    assert redact('password = "hunter2"') == ('password = "[REDACTED:assignment]"', 1)
    assert redact("PASSWORD: hunter2") == ("PASSWORD: [REDACTED:assignment]", 1)


def test_cut_off_private_key_is_replaced_up_to_the_end_of_its_key_material():
    text = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkq\nhkiG9w0BAQEFAASC\n\nwhy does ssh reject it?"
    assert redact(text) == ("[REDACTED:private_key]\n\nwhy does ssh reject it?", 1)


def test_private_key_block_is_replaced_whole_and_text_around_it_survives():
    text = "before\n-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBkg\n-----END EC PRIVATE KEY-----\nafter"
    assert redact(text) == ("before\n[REDACTED:private_key]\nafter", 1)


def test_counts_every_secret_in_a_text():
    text = "a=AKIAIOSFODNN7EXAMPLE b=AKIAI44QH8DHBEXAMPLE\nPASSWORD=sunshine"
    out, n = redact(text)
    assert n == 3 and out.count("[REDACTED:") == 3


def test_redacting_twice_changes_nothing_more():
    once, n = redact("\n".join(text for _, text, _ in SECRETS))
    assert n >= len(SECRETS) and redact(once) == (once, 0)


def test_entropy_separates_random_tokens_from_words():
    assert shannon_entropy("aaaa") == 0.0
    assert shannon_entropy("abcd") == pytest.approx(2.0)
    assert looks_random("q7Lm2Xz9Rt4Vb8Nc1Wd6Ks3Jp0")
    assert not looks_random("handleUserAuthenticationSuccess")
    assert not looks_random("e83c5163316f89bfbde7d9ab23ca2e25604af290")  # hex: a hash, decided not secret


def test_large_text_without_secrets_is_returned_as_is():
    text = "def f(x):\n    return x + 1\n" * 5000
    assert redact(text) == (text, 0)
