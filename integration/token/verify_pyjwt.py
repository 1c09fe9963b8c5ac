"""Verifies wisp tokens the way an OIDC relying party does, with PyJWT (Debian python3-jwt).

usage: verify_pyjwt.py ISSUER AUDIENCE TOKEN [FORGED...]
  Discovery: GET ISSUER/.well-known/openid-configuration, then PyJWKClient(jwks_uri).
  TOKEN must verify (RS256 or ES256, iss, aud). Each FORGED token must be refused.
  The test CA comes from SSL_CERT_FILE. Prints one line per check; exit 0 when all pass.
"""
import datetime
import json
import sys
import time
import urllib.request

import jwt
from jwt import PyJWKClient

issuer, audience, token, forged = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
with urllib.request.urlopen(issuer + "/.well-known/openid-configuration", timeout=10) as r:
    discovery = json.load(r)
assert discovery["issuer"] == issuer, discovery
client = PyJWKClient(discovery["jwks_uri"])
algs = ["RS256", "ES256"]


def decode(tok, **kw):
    key = client.get_signing_key_from_jwt(tok).key
    return jwt.decode(tok, key, algorithms=algs, audience=kw.pop("audience", audience),
                      issuer=issuer, **kw)


failures = 0
claims = decode(token)
print("ok", jwt.get_unverified_header(token)["alg"], claims["sub"])

# The verifier's clock moved: past exp, and before nbf.
now = time.time()
cases = [
    ("expired", {"leeway": datetime.timedelta(seconds=-(claims["exp"] - now + 5)),
                 "options": {"verify_nbf": False}}),
    ("not-yet-valid", {"leeway": datetime.timedelta(seconds=-(now - claims["nbf"] + 5)),
                       "options": {"verify_exp": False}}),
    ("wrong-audience", {"audience": "someone-else"}),
]
for name, kw in cases:
    try:
        # A negative leeway is the verifier's clock shifted: PyJWT checks exp <= now - leeway and
        # nbf > now + leeway.
        decode(token, **kw)
        print("ACCEPTED", name)
        failures += 1
    except jwt.PyJWTError as e:
        print("refused", name, type(e).__name__)

for i, tok in enumerate(forged):
    try:
        decode(tok)
        print("ACCEPTED forged", i)
        failures += 1
    except (jwt.PyJWTError, KeyError, ValueError) as e:
        print("refused forged", i, type(e).__name__)

sys.exit(1 if failures else 0)
