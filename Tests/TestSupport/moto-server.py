#!/usr/bin/env python3
"""Runs moto_server with one fix to its signature check, so that it checks what S3 checks.

moto 5 rebuilds the canonical request from a query string it has already percent-decoded, so a
'/' in a query value (ListObjectsV2's prefix=a/b/) is signed as '/', where SigV4 and S3 encode it
as '%2F'. boto3's own list_objects_v2(Prefix="a/b/") is refused by it for that reason. Here each
query name and value is encoded again as SigV4 says (RFC 3986 unreserved characters kept) before
moto computes the signature; nothing else changes.

Usage: moto-server.py -H 127.0.0.1 -p PORT (the arguments of moto_server)
"""
import sys
from urllib.parse import quote, unquote

from moto.iam import access_control
from moto.server import main

original = access_control.IAMRequestBase._create_aws_request


def encoded(part):
    return quote(unquote(part), safe="-_.~")


def create_aws_request(self):
    path, mark, query = self._path.partition("?")
    if mark:
        pairs = (pair.partition("=") for pair in query.split("&") if pair)
        self._path = path + "?" + "&".join(encoded(name) + "=" + encoded(value) for name, _, value in pairs)
    return original(self)


access_control.IAMRequestBase._create_aws_request = create_aws_request
sys.exit(main(sys.argv[1:]))
