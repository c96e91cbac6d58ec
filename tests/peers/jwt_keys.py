"""Keys and tokens for the --auth tests, made with PyJWT and cryptography.

usage: jwt_keys.py keys DIR      write DIR/secret (HS256), rsa.pem,
                                 rsa.pub.pem, ec.pem, ec.pub.pem and jwks.json
                                 (the RSA key as kid k1, the EC key as k2)
       jwt_keys.py mint DIR SUB TTL TOPICS   print an HS256 token by DIR/secret
                                 (TOPICS comma-separated)
"""
import json
import os
import secrets
import sys
import time

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa


def pem(key, private):
    if private:
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def keys(d):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "secret"), "w") as f:
        f.write(secrets.token_urlsafe(48) + "\n")
    r = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    e = ec.generate_private_key(ec.SECP256R1())
    for name, data in [("rsa.pem", pem(r, True)), ("rsa.pub.pem", pem(r, False)), ("ec.pem", pem(e, True)), ("ec.pub.pem", pem(e, False))]:
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
    k1 = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(r.public_key()))
    k2 = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(e.public_key()))
    k1.update(kid="k1", use="sig", alg="RS256")
    k2.update(kid="k2", use="sig", alg="ES256")
    with open(os.path.join(d, "jwks.json"), "w") as f:
        json.dump({"keys": [k1, k2]}, f)


def mint(d, sub, ttl, topics):
    with open(os.path.join(d, "secret"), "rb") as f:
        secret = f.read().rstrip(b"\n")
    claims = {"sub": sub, "exp": int(time.time()) + int(ttl), "topics": [t for t in topics.split(",") if t]}
    print(jwt.encode(claims, secret, algorithm="HS256"))


if sys.argv[1] == "keys":
    keys(sys.argv[2])
else:
    mint(*sys.argv[2:6])
