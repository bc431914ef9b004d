#!/usr/bin/env python3
"""Golden vectors for pipelinectl's SigV4 signer, computed by botocore (the AWS SDK for Python).

Run: python3 make-vectors.py > vectors.json   (pip install botocore)
Each vector is a request as our S3 client sends it (method, URL, headers, body) with fixed
credentials and time; botocore's S3SigV4Auth signs it, and the test signs the same request and
compares every header byte for byte.
"""
import datetime
import hashlib
import json
from unittest import mock

import botocore
import botocore.auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

WHEN = datetime.datetime(2026, 11, 22, 8, 30, 5)

CASES = [
    dict(name="get-object", method="GET", url="http://127.0.0.1:9000/photos/2026/a.jpg", headers={}, body=""),
    dict(name="head-object-virtual-host", method="HEAD", url="https://images.s3.eu-west-1.amazonaws.com/thumbs/x.png",
         headers={}, body="", region="eu-west-1"),
    dict(name="key-with-spaces-and-unicode", method="GET",
         url="http://127.0.0.1:9000/bucket/dir%20one/%C3%BCnic%C3%B8de%2Bplus.jpg", headers={}, body=""),
    dict(name="list-unsorted-query", method="GET",
         url="http://127.0.0.1:9000/bucket?prefix=cache%2Fab&list-type=2&max-keys=1000&continuation-token=a%2Bb%3D%3D",
         headers={}, body=""),
    dict(name="put-with-headers", method="PUT", url="http://127.0.0.1:9000/bucket/out/x-1.jpg",
         headers={"Content-Type": "image/jpeg", "Cache-Control": "public, max-age=31536000",
                  "If-None-Match": "*", "x-amz-meta-source": "https://example.com/a.jpg"},
         body="fake jpeg bytes"),
    dict(name="put-session-token", method="PUT", url="http://localhost:4566/bucket/k", headers={"Content-Type": "image/webp"},
         body="\u00ff\u00d8\u00ff", token="IQoJb3JpZ2luX2VjEXAMPLETOKEN//////////wEaCXVzLWVhc3QtMSJHMEUCIQ=="),
    dict(name="delete-object", method="DELETE", url="http://127.0.0.1:9000/bucket/cache/ab/cd", headers={}, body=""),
    dict(name="header-with-extra-spaces", method="PUT", url="http://127.0.0.1:9000/bucket/m",
         headers={"x-amz-meta-note": "  two   spaces  inside ", "Content-Type": "application/octet-stream"}, body="x"),
]

vectors = []
for case in CASES:
    region = case.get("region", "us-east-1")
    creds = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", case.get("token"))
    body = case["body"].encode("latin-1")
    request = AWSRequest(method=case["method"], url=case["url"], headers=dict(case["headers"]), data=body)
    signer = botocore.auth.S3SigV4Auth(creds, "s3", region)
    with mock.patch("botocore.auth.get_current_datetime", return_value=WHEN):
        signer.add_auth(request)
    # The canonical request as signed (without the Authorization header just added), for debugging.
    unsigned = AWSRequest(method=case["method"], url=case["url"], headers=dict(case["headers"]), data=body)
    unsigned.context["timestamp"] = WHEN.strftime("%Y%m%dT%H%M%SZ")
    signer._modify_request_before_signing(unsigned)
    canonical = signer.canonical_request(unsigned)
    vectors.append(dict(
        name=case["name"], method=case["method"], url=case["url"], headers=case["headers"],
        body_hex=body.hex(), region=region, access_key=creds.access_key, secret_key=creds.secret_key,
        session_token=case.get("token"), time=WHEN.strftime("%Y%m%dT%H%M%SZ"),
        expected={k.lower(): v for k, v in request.headers.items()
                  if k.lower() in ("authorization", "x-amz-date", "x-amz-content-sha256", "x-amz-security-token")},
        canonical_request=canonical,
    ))
# Presigned GET URLs (query-string authentication), as `pipelinectl report --html --presign` links objects.
PRESIGNED = [
    dict(name="presigned-path-style", url="http://127.0.0.1:9000/web/thumbs/big%20pics/photo_0.jpg", expires=3600),
    dict(name="presigned-virtual-host", url="https://web.s3.eu-west-1.amazonaws.com/t/a%2Bb.webp", expires=604800,
         region="eu-west-1"),
    dict(name="presigned-session-token", url="http://localhost:4566/bucket/k.png", expires=60,
         token="IQoJb3JpZ2luX2VjEXAMPLETOKEN//////////wEaCXVzLWVhc3QtMSJHMEUCIQ=="),
]
presigned = []
for case in PRESIGNED:
    region = case.get("region", "us-east-1")
    creds = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", case.get("token"))
    request = AWSRequest(method="GET", url=case["url"], headers={})
    signer = botocore.auth.S3SigV4QueryAuth(creds, "s3", region, expires=case["expires"])
    with mock.patch("botocore.auth.get_current_datetime", return_value=WHEN):
        signer.add_auth(request)
    presigned.append(dict(name=case["name"], url=case["url"], region=region, expires=case["expires"],
                          access_key=creds.access_key, secret_key=creds.secret_key, session_token=case.get("token"),
                          time=WHEN.strftime("%Y%m%dT%H%M%SZ"), expected=request.url))
print(json.dumps({"botocore": botocore.__version__, "vectors": vectors, "presigned": presigned}, indent=2, ensure_ascii=False))
