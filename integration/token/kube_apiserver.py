"""A stand-in for kube-apiserver's service-account token signer, with PyJWT (Debian python3-jwt),
independent of wisp's own JWT code: the CSI integration test signs the kubelet's pod tokens with it.

usage: kube_apiserver.py keygen DIR
         writes DIR/apiserver-key.pem (ES256 private key) and DIR/apiserver-jwks.json (its JWKS)
       kube_apiserver.py sign DIR ISSUER AUDIENCE NAMESPACE SA POD POD_UID NODE [LIFETIME]
         prints a token shaped as TokenRequest makes one for a pod (BoundObjectRef kind Pod):
         sub system:serviceaccount:NS:SA and kubernetes.io {namespace, pod, serviceaccount, node}
"""
import base64
import json
import sys
import time
import uuid

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

KID = "apiserver-test-key"

if sys.argv[1] == "keygen":
    d = sys.argv[2]
    key = ec.generate_private_key(ec.SECP256R1())
    with open(f"{d}/apiserver-key.pem", "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    # The JWK is written from the key's numbers rather than with PyJWT's to_jwk: Debian's PyJWT
    # (2.6) does not left-pad a coordinate that starts with a zero byte (1 key in ~128), which
    # RFC 7518 6.2.1.2 requires and wisp rightly refuses.
    nums = key.public_key().public_numbers()
    b64 = lambda n: base64.urlsafe_b64encode(n.to_bytes(32, "big")).rstrip(b"=").decode()
    jwk = {"kty": "EC", "crv": "P-256", "x": b64(nums.x), "y": b64(nums.y),
           "kid": KID, "use": "sig", "alg": "ES256"}
    with open(f"{d}/apiserver-jwks.json", "w") as f:
        json.dump({"keys": [jwk]}, f)
elif sys.argv[1] == "sign":
    d, iss, aud, ns, sa, pod, pod_uid, node = sys.argv[2:10]
    lifetime = int(sys.argv[10]) if len(sys.argv) > 10 else 3600
    now = int(time.time())
    claims = {
        "iss": iss, "aud": [aud], "sub": f"system:serviceaccount:{ns}:{sa}",
        "iat": now, "nbf": now, "exp": now + lifetime, "jti": str(uuid.uuid4()),
        "kubernetes.io": {
            "namespace": ns,
            "pod": {"name": pod, "uid": pod_uid},
            "serviceaccount": {"name": sa, "uid": "sa-" + sa},
            "node": {"name": node, "uid": "node-uid-" + node},
        },
    }
    with open(f"{d}/apiserver-key.pem", "rb") as f:
        key = serialization.load_pem_private_key(f.read(), password=None)
    print(jwt.encode(claims, key, algorithm="ES256", headers={"kid": KID}))
else:
    sys.exit(__doc__)
