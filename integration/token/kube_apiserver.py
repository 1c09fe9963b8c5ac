"""A stand-in for kube-apiserver's service-account token signer, with PyJWT (Debian python3-jwt),
independent of wisp's own JWT code: the CSI integration test signs the kubelet's pod tokens with it.

usage: kube_apiserver.py keygen DIR
         writes DIR/apiserver-key.pem (ES256 private key) and DIR/apiserver-jwks.json (its JWKS)
       kube_apiserver.py sign DIR ISSUER AUDIENCE NAMESPACE SA POD POD_UID NODE [LIFETIME]
         prints a token shaped as TokenRequest makes one for a pod (BoundObjectRef kind Pod):
         sub system:serviceaccount:NS:SA and kubernetes.io {namespace, pod, serviceaccount, node}
"""
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
    jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key.public_key()))
    jwk.update({"kid": KID, "use": "sig", "alg": "ES256"})
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
