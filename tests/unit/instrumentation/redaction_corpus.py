"""The redaction corpus: secret shapes that must not survive `redact`, and ordinary text that must come back as is.

Every value is fake. `measure()` gives recall (secrets fully removed / secrets) and false positives (negatives
changed / negatives); docs/security.md ("Redaction recall") publishes them, and
tests/unit/instrumentation/test_redaction.py checks that the published figures are the measured ones.

    .venv/bin/python -m tests.unit.instrumentation.redaction_corpus     # prints the figures as JSON
"""

from __future__ import annotations

import json
import random
import string

from instrumentation.redaction import redact

LEAK_WINDOW = 8  # a secret counts as leaked if any 8 consecutive characters of it survive (its tail, say)


def _fake(alphabet: str, n: int, seed: int) -> str:
    """`n` characters of `alphabet`, the same on every run: long fake values without a page of literals."""
    rng = random.Random(seed)
    return "".join(rng.choice(alphabet) for _ in range(n))


_B64 = string.ascii_letters + string.digits + "+/"
_B64URL = string.ascii_letters + string.digits + "_-"
_ALNUM = string.ascii_letters + string.digits
LONG_PASSWORD = _fake(_ALNUM + "!#%&*-_=+", 300, 1)
LONG_ENV_TOKEN = _fake(_ALNUM, 600, 2)
LONG_BEARER = _fake(_B64URL, 5000, 3)
LONG_JSON_KEY = _fake(_ALNUM, 2000, 4)
LONG_YAML_SECRET = _fake(_ALNUM, 400, 5)
LONG_CLI_TOKEN = _fake(_ALNUM, 1500, 6)
LONG_AZURE_KEY = _fake(_B64, 1200, 7) + "=="
LONG_RANDOM_LITERAL = _fake(_ALNUM, 1100, 8)
LONG_GOOGLE_TOKEN = "ya29." + _fake(_B64URL, 4500, 9)
LONG_SAS_SIG = _fake(_ALNUM, 1300, 10) + "%3D"

# (case id, text containing the secret, the secret: none of it may survive). Grouped by shape.
SECRETS: list[tuple[str, str, str]] = [
    # -- the shapes the corpus started with
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

    # -- passwords given to a command by a short flag (the flag means other things to other commands)
    ("mysql_short_flag", "mysql -uroot -pS3cr3tPass -h db.internal shop", "S3cr3tPass"),
    ("mysqldump_quoted_short_flag", "mysqldump -u backup -p'Dump!2024x' --all-databases > all.sql", "Dump!2024x"),
    ("mariadb_short_flag_continued_line", "mariadb -h 10.0.0.7 \\\n  -u app -pMaria9Pw app < seed.sql", "Maria9Pw"),
    ("sshpass_spaced", "sshpass -p 'Hunt3r!x' ssh deploy@10.0.0.5 uptime", "Hunt3r!x"),
    ("sshpass_attached", "sshpass -pR00tPw0rd scp backup.tgz root@nas:/srv", "R00tPw0rd"),
    ("curl_user_password", "curl -u admin:S3cretPw https://ci.example.com/api/json", "S3cretPw"),
    ("curl_long_user_flag_quoted", 'curl -X POST --user "deploy:Xy7#kLm2q" https://ci.example.com/job/build',
     "Xy7#kLm2q"),
    ("curl_attached_u_after_url", "curl -sS 'http://localhost:9200/_cat/indices?v&h=index' -uelastic:Elast1cPw",
     "Elast1cPw"),
    ("docker_login_short_flag", "docker login -u ci-bot -p Dkr0Passw0rd registry.example.com", "Dkr0Passw0rd"),
    ("redis_cli_auth_flag", "redis-cli -h cache.internal -p 6379 -a R3disAuthPw PING", "R3disAuthPw"),
    ("mongosh_password_flag", "mongosh --host db -u root -p M0ngoR00t --authenticationDatabase admin", "M0ngoR00t"),
    ("openssl_passin", "openssl rsa -in server.key -passin pass:K3yPassphrase -out plain.key", "K3yPassphrase"),
    ("wget_http_password", "wget --http-user=ops --http-password=Wg3tPassw https://files.example.com/a.tgz",
     "Wg3tPassw"),
    # -- bot tokens inside URLs and other unprefixed chat-bot tokens
    ("telegram_token_in_api_url",
     "requests.get('https://api.telegram.org/bot7123456789:AAE42TMKVd5KdcORt9s_OqyMTx_qzlWi5Xn/sendMessage')",
     "7123456789:AAE42TMKVd5KdcORt9s_OqyMTx_qzlWi5Xn"),
    ("telegram_token_in_curl",
     "curl -s https://api.telegram.org/bot123456789:AABhFK-DFsGX8rhDHfpRtR7j558F4oDnCDz/getUpdates | jq .",
     "123456789:AABhFK-DFsGX8rhDHfpRtR7j558F4oDnCDz"),
    ("telegram_token_in_env", "TELEGRAM_BOT_TOKEN=98765432:AA5xPliU0lKwtpwc7fGYXnGsIGIv5NLDO-7",
     "98765432:AA5xPliU0lKwtpwc7fGYXnGsIGIv5NLDO-7"),
    ("discord_bot_token_in_code", "client.run('MTIzNDU2Nzg5MDEyMzQ1Njc4.Yd5NnD.RGTn0gsPRvFj2IqnTC6LXb3cF9E')",
     "MTIzNDU2Nzg5MDEyMzQ1Njc4.Yd5NnD.RGTn0gsPRvFj2IqnTC6LXb3cF9E"),
    ("discord_bot_authorization_header", "Authorization: Bot NzkyNzE1NDU0MTk2MDg4ODQy.vUgu0P.A1x4J0-0L2xf3C04kur8h4bBAqx",
     "NzkyNzE1NDU0MTk2MDg4ODQy.vUgu0P.A1x4J0-0L2xf3C04kur8h4bBAqx"),
    ("discord_token_26_char_id_in_prose",
     "my bot logs in with MTIzNDU2Nzg5MDEyMzQ1Njc4OQ.YdgLto.95V72kJwZLDOhmQA3f3TDN0MKOQtSw8nu5KNCW and gets 401",
     "MTIzNDU2Nzg5MDEyMzQ1Njc4OQ.YdgLto.95V72kJwZLDOhmQA3f3TDN0MKOQtSw8nu5KNCW"),
    ("discord_token_in_dotenv", "DISCORD=OTg3NjU0MzIxMDk4NzY1NDMy.buV5ek.KziCekJG6L1vdQTQN2R77yDnvVZSb0xVIdzPRU",
     "OTg3NjU0MzIxMDk4NzY1NDMy.buV5ek.KziCekJG6L1vdQTQN2R77yDnvVZSb0xVIdzPRU"),
    # -- Docker Hub and other prefixed tokens
    ("docker_hub_pat_piped", "echo dckr_pat_Qm49yOZkTCVWAUxLhuU4IgLjk_M | docker login -u acme --password-stdin",
     "dckr_pat_Qm49yOZkTCVWAUxLhuU4IgLjk_M"),
    ("docker_hub_pat_in_actions", "        with:\n          username: acme\n          password: dckr_pat_NsdBNvGopMjdJE8PjyWhCNfuH6U\n",
     "dckr_pat_NsdBNvGopMjdJE8PjyWhCNfuH6U"),
    ("docker_hub_org_token", "the org token dckr_oat_His7wGcMkwJkFgBmpYxxsTJGfaxxnbUN was revoked",
     "dckr_oat_His7wGcMkwJkFgBmpYxxsTJGfaxxnbUN"),
    ("vault_service_token",
     "export VAULT_TOKEN=hvs.CAESIMcop47QDn3meHR1cAzFVxJsCbyN8pC7RPqZ6eRREcJA17jpPTmt5OzQNWlQops5op5_kpNGekUhxil4GdUfy5p",
     "hvs.CAESIMcop47QDn3meHR1cAzFVxJsCbyN8pC7RPqZ6eRREcJA17jpPTmt5OzQNWlQops5op5_kpNGekUhxil4GdUfy5p"),
    ("grafana_service_account_token", "curl -H 'X-Grafana-Key glsa_lvYKqui3VQ0zLM9aGlmd399Qn3TtmTM0_161b0f4f' grafana:3000",
     "glsa_lvYKqui3VQ0zLM9aGlmd399Qn3TtmTM0_161b0f4f"),
    # -- Django SECRET_KEY values with punctuation, in settings, .env and compose files
    ("django_insecure_settings", "SECRET_KEY = 'django-insecure-8n$#v@x(2k!z=^&m4q)w_+7y*o1p-3r%e^c6t!b5j9s0l'",
     "django-insecure-8n$#v@x(2k!z=^&m4q)w_+7y*o1p-3r%e^c6t!b5j9s0l"),
    ("django_key_env_punctuation", "DEBUG=0\nDJANGO_SECRET_KEY=k3y!@#$%^&*(-_=+)x9Qz2Lp7Wm\n", "k3y!@#$%^&*(-_=+)x9Qz2Lp7Wm"),
    ("django_key_export_leading_paren", "export SECRET_KEY=(w8#k!2=z)^q&m*v-4_+x1@p", "(w8#k!2=z)^q&m*v-4_+x1@p"),
    ("django_key_compose_list", "    environment:\n      - DJANGO_SECRET_KEY=%9k!x@2#q$z^7&m*(w)-_=+p\n      - DEBUG=0\n",
     "%9k!x@2#q$z^7&m*(w)-_=+p"),
    ("django_key_yaml_quoted", 'django:\n  secret_key: "y#7!k@2(q)_=+z^&*m-4%x$w9"\n', "y#7!k@2(q)_=+z^&*m-4%x$w9"),
    # -- INI/conf `password = word` lines, .pgpass and .netrc
    ("ini_password_plain_word", "[mysql]\nuser = backup\npassword = tangerine\n", "tangerine"),
    ("my_cnf_tight", "[client]\nuser=root\npassword=bluebird\nhost=127.0.0.1\n", "bluebird"),
    ("ini_password_with_spaces", "[smtp]\nserver = mail.example.com\npassword = correct horse battery staple\n",
     "correct horse battery staple"),
    ("ini_secret_colon", "[ldap]\nbind_dn: cn=admin,dc=example,dc=org\nbind_password: lemonade\n", "lemonade"),
    ("ini_indented_under_profile", "[profile ci]\n  region = eu-west-1\n  secret = marmalade\n", "marmalade"),
    ("pgpass_line", "db.example.com:5432:app:app_user:Pg8Pass!word\n", "Pg8Pass!word"),
    ("pgpass_wildcards", "# ~/.pgpass\n*:*:*:replicator:R3plic8Me\n", "R3plic8Me"),
    ("netrc_multiline", "machine api.heroku.com\n  login me@example.com\n  password 4f3e2d1c-ab12-cd34-ef56-7890abcdef12\n",
     "4f3e2d1c-ab12-cd34-ef56-7890abcdef12"),
    ("netrc_one_line", "machine github.com login octocat password n3trcPassw0rd", "n3trcPassw0rd"),
    # -- keys that are the whole userinfo of a URL (Sentry DSNs)
    ("sentry_dsn_python", 'sentry_sdk.init(dsn="https://a4269c5557868796c6b928787fbb5917@o123456.ingest.sentry.io/4505")',
     "a4269c5557868796c6b928787fbb5917"),
    ("sentry_dsn_env", "SENTRY_DSN=https://167b0541b6751c9531fabb619556dfe4@o98765.ingest.us.sentry.io/123",
     "167b0541b6751c9531fabb619556dfe4"),
    ("sentry_dsn_self_hosted_js", "Sentry.init({ dsn: 'https://0a1b2c3d4e5f60718293a4b5c6d7e8f9@sentry.example.com/2' })",
     "0a1b2c3d4e5f60718293a4b5c6d7e8f9"),
    ("token_as_url_userinfo", "git clone https://Lma6RbS18MRl84DtiWq74OH60i2VvXof@git.example.com/team/repo.git",
     "Lma6RbS18MRl84DtiWq74OH60i2VvXof"),
    # -- values longer than any length cap: the tail must go too
    ("long_quoted_password", f'password = "{LONG_PASSWORD}"', LONG_PASSWORD),
    ("long_env_token", f"API_TOKEN={LONG_ENV_TOKEN}\nLOG_LEVEL=info", LONG_ENV_TOKEN),
    ("long_bearer_header", f"Authorization: Bearer {LONG_BEARER}", LONG_BEARER),
    ("long_json_api_key", f'{{"api_key": "{LONG_JSON_KEY}"}}', LONG_JSON_KEY),
    ("long_unquoted_yaml_secret", f"oauth:\n  client_secret: {LONG_YAML_SECRET}\n", LONG_YAML_SECRET),
    ("long_cli_token_flag", f"tool deploy --token {LONG_CLI_TOKEN} --env prod", LONG_CLI_TOKEN),
    ("long_azure_account_key", f"AccountName=acct;AccountKey={LONG_AZURE_KEY};EndpointSuffix=core.windows.net",
     LONG_AZURE_KEY),
    ("long_random_literal", f'const NONCE_SEED = "{LONG_RANDOM_LITERAL}";', LONG_RANDOM_LITERAL),
    ("long_google_oauth_token", f"token: {LONG_GOOGLE_TOKEN}", LONG_GOOGLE_TOKEN),
    ("long_azure_sas_signature", f"https://acct.blob.core.windows.net/c/f?sv=2022-11-02&sig={LONG_SAS_SIG}&se=2030",
     LONG_SAS_SIG),
    # -- AWS secret access keys pasted bare
    ("aws_secret_alone_on_a_line", "here it is:\nwJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\nwhy 403?",
     "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    ("aws_secret_in_prose", "I rotated it, the new one is J9GnC1khTskCYme9Sq+BEo/eJDT2pyYRwC3AW1DD and it still fails",
     "J9GnC1khTskCYme9Sq+BEo/eJDT2pyYRwC3AW1DD"),
    ("aws_secret_after_key_id", "AKIAIOSFODNN7EXAMPLE\nx0EY91LgoTzNu39QOWRXbRjaI6m1F7Uky8lSSCRE\n",
     "x0EY91LgoTzNu39QOWRXbRjaI6m1F7Uky8lSSCRE"),
    ("aws_credentials_csv", "User name,Access key ID,Secret access key\nci,AKIAI44QH8DHBEXAMPLE,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",
     "i/htSTD9FIJOjgE6CriN9SwCi38esXBXQVWY25oh"),
    ("aws_configure_set", "aws configure set aws_secret_access_key je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY",
     "je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY"),
]

NEGATIVES: list[tuple[str, str]] = [
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

    # -- near misses of the new rules
    ("short_flags_that_are_not_passwords",
     "docker run -d -p 8080:80 -u 1000:1000 -v $PWD:/app nginx\nssh -p 2222 deploy@10.0.0.5\nscp -P 2222 a.txt host:/tmp\n"
     "mkdir -p build/out && cp -p a b\npsql -h db -p 5432 -U app shop"),
    ("curl_credentials_from_the_environment",
     'curl -u $USER:$PASS https://api.example.com\ncurl -u "${API_USER}:${API_TOKEN}" -X GET https://api.example.com'),
    ("curl_user_prompt_and_user_agent",
     "curl -u admin https://ci.example.com   # asks for the password\ncurl --user-agent 'Mozilla/5.0 (X11)' https://x.org"),
    ("mysql_password_prompt_and_variable",
     "mysql -h db -P 3306 -u root -p shop\nmysql -u root -p$MYSQL_ROOT_PASSWORD\nmysqldump -u backup -p --single-transaction db"),
    ("sshpass_from_file_or_env", 'sshpass -f ~/.ssh/pw ssh -p 2222 host\nsshpass -e ssh deploy@host\nsshpass -p "$SSHPASS" scp a b:/tmp'),
    ("redis_and_openssl_without_literals",
     'redis-cli -h cache -p 6379 PING\nredis-cli -a "$REDIS_PASSWORD" INFO\n'
     "openssl rsa -in k.pem -passin env:KEY_PASS -out k2.pem\nopenssl req -new -key k.pem -passin file:/run/pw"),
    ("colon_separated_non_pgpass", "00:01:30:15:42\nlocalhost:8080:GET:/api/v1/users:200\nx = a[1:2:3]"),
    ("ini_without_secrets",
     "[server]\nhost = example.com\nport = 8080\ntoken_type = bearer\npassword_file = /etc/app/pw\n"),
    ("ini_placeholders", "[database]\npassword = ${DB_PASSWORD}\nsecret = %(vault_secret)s\ntoken =\n"),
    ("ini_header_then_code", "[Unreleased]\n\npassword = get_password()\ntoken = session.token\n; password = set in env\n"),
    ("env_lines_with_code_values",
     "SECRET_KEY=os.environ['DJANGO_SECRET_KEY']\nAPI_KEY=get_api_key()\nTOKEN=None\nPASSWORD=$(pass show db)\n"
     "MAX_TOKEN=512\nAPI_KEY=settings.API_KEY"),
    ("django_settings_code", "SECRET_KEY = get_random_secret_key()\nDEBUG = env.bool('DEBUG', default=False)"),
    ("sentry_without_a_key",
     'sentry_sdk.init(dsn=os.environ["SENTRY_DSN"], traces_sample_rate=0.1)\nDSN = "https://<key>@o0.ingest.sentry.io/0"'),
    ("git_urls_with_user_names",
     "git@github.com:org/repo.git\nhttps://octocat@github.com/org/repo.git\nssh://deploy-user-for-ci@git.example.com/x.git"),
    ("telegram_url_placeholders",
     "https://api.telegram.org/bot<token>/sendMessage\nurl = f'https://api.telegram.org/bot{TOKEN}/getMe'"),
    ("dotted_names_and_base64", "torch.nn.functional.scaled_dot_product_attention(q, k, v)\n"
     "asset = M2QtbW9kZWwtYXNzZXQtdjEtcHJvZA.abcdef.ghijklmnopqrstuvwxyz0123456\njquery-3.6.0.min.js"),
    ("hashes", "sha256: 9f86d081884c4d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\n"
     "md5 = d41d8cd98f00b204e9800998ecf8427e\nsha1 base64: qZk+NkcGgWq6PiVxeFDCbJzQ2J0=\n"
     "E83C5163316F89BFBDE7D9AB23CA2E25604AF290\nsha256 base64: n4bQgYhMfWWaL+qgxVrQFaO/TxsrC4Is0V1sFbDwCgg="),
    ("uuids_and_trace_ids",
     "request 3f2b8c1e-9a4d-4c7e-b1f0-2d6a8e9c0b13 failed; trace_id=4bf92f3577b34da6a3ce929d0e0e4736"),
    ("base64_images",
     '<img src="data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==">\n'
     f'.logo {{ background: url(data:image/png;base64,{_fake(_B64, 1600, 20)}==); }}'),
    ("more_model_names", "Qwen/Qwen2.5-Coder-7B-Instruct\nmistralai/Mixtral-8x7B-Instruct-v0.1\ngpt-4o-2024-08-06\n"
     "claude-3-5-sonnet-20241022\nfacebook/opt-125m"),
    ("forty_character_paths_and_names",
     "see components/Header/IndexPageLayoutV2Final and handleUserAuthenticationSuccessCallback1\n"
     "python3/site/Packages/Torch/Nn/Modules/Foo"),
    ("long_sql_string", 'query = "' + "SELECT id, name, email FROM users WHERE active = 1 AND created_at > now() " * 5 + '"'),
    ("prose_about_secrets",
     "Use a strong password: at least 12 characters. The token expires after 1 hour; rotate secrets regularly.\n"
     "Set AWS_SECRET_ACCESS_KEY in the environment and never commit it."),
    ("keyword_arguments", "login(user=username, password=password)\nconnect(token=self.token, secret=cfg.secret)"),
    ("kubernetes_secret_ref",
     "env:\n  - name: DB_PASSWORD\n    valueFrom:\n      secretKeyRef:\n        name: db\n        key: password\n"),
    ("json_schema_and_actions",
     '{"password": {"type": "string", "minLength": 12}}\npassword: ${{ secrets.DOCKERHUB_TOKEN }}'),
    ("go_struct_tags", 'type Login struct {\n\tPassword string `json:"password"`\n\tToken    string `json:"token,omitempty"`\n}'),
    ("compose_ports", '    ports:\n      - "8080:80"\n      - 5432:5432\n    user: "1000:1000"'),
    ("netrc_with_a_variable", "machine api.example.com login me password $NETRC_PASSWORD"),
    ("long_url_without_credentials",
     "https://example.com/search?" + "&".join(f"filter{i}=value{i}" for i in range(40))),
]


def leaked(secret: str, out: str) -> bool:
    """Whether any part of `secret` of LEAK_WINDOW characters (all of it, if shorter) is still in `out`."""
    w = min(LEAK_WINDOW, len(secret))
    return any(secret[i:i + w] in out for i in range(len(secret) - w + 1))


def measure() -> dict:
    """Recall and false positives of `redact` on this corpus."""
    missed, partly = [], []
    for case, text, secret in SECRETS:
        out, _ = redact(text)
        if secret in out:
            missed.append(case)
        elif leaked(secret, out):
            partly.append(case)
    changed = [case for case, text in NEGATIVES if redact(text) != (text, 0)]
    return {"secrets": len(SECRETS), "removed": len(SECRETS) - len(missed) - len(partly), "missed": missed,
            "partly_leaked": partly, "negatives": len(NEGATIVES), "false_positives": len(changed),
            "changed": changed}


if __name__ == "__main__":
    print(json.dumps(measure(), indent=2))
