#!/usr/bin/env python3
"""Runs moto_server with one fix to its signature check, so that it checks what S3 checks, and
one to the cost of its SQS ReceiveMessage.

moto 5 rebuilds the canonical request from a query string it has already percent-decoded, so a
'/' in a query value (ListObjectsV2's prefix=a/b/) is signed as '/', where SigV4 and S3 encode it
as '%2F'. boto3's own list_objects_v2(Prefix="a/b/") is refused by it for that reason. Here each
query name and value is encoded again as SigV4 says (RFC 3986 unreserved characters kept) before
moto computes the signature; nothing else changes.

moto 5 checks each message it is about to return against the queue's retention period by
computing every attribute of the queue, approximate message counts included, three times: each
walks every message of the queue. A receive of 10 messages from a queue of 1,000 took it about
0.5 s of CPU (90% of its time in bench/work.py's SQS run, on the cores the worker being measured
runs on). Here the same check reads the queue's retention period directly: the same answer,
without the walks. Real SQS has no such cost.

moto's SQS also walks every message of a queue on each receive, and reads the clock for each
through datetime arithmetic (twice a message): here its SQS models read time.time() instead, the
same number of seconds since the epoch.

Two costs of moto's server that real S3 and SQS do not have are taken off every request: its
dispatcher lists moto's own package directory (a listdir and an isdir for each of its ~200
modules) to find the backend of each request, and werkzeug writes an access line for each to
stderr. In bench/work.py's SQS run they were a fifth of moto's CPU, on the cores the worker being
measured runs on. The list of modules is read once here; access lines are not written (errors
still are).

It binds the port itself and prints it on stdout, one line, once it accepts connections: with
-p 0 (the default) the kernel picks a free port, so two servers started at once cannot be handed the
same one, and a caller waits for that line instead of polling the port (a poll of a port nobody
listens on yet can connect to itself on loopback).

Usage: moto-server.py [-H 127.0.0.1] [-p PORT]
"""
import argparse
import os
import sys
import time
from urllib.parse import quote, unquote

from moto import backends
import moto.sqs.models as sqs_models
from moto.core import utils as moto_utils
from moto.iam import access_control
from moto.sqs.models import SQSBackend
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import WSGIRequestHandler, make_server

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


def unix_time(dt=None):
    return time.time() if dt is None else moto_utils.unix_time(dt)


def unix_time_millis(dt=None):
    return time.time() * 1000.0 if dt is None else moto_utils.unix_time_millis(dt)


sqs_models.unix_time = unix_time
sqs_models.unix_time_millis = unix_time_millis


def is_message_valid_based_on_retention_period(self, queue_name, message):
    queue = self.get_queue(queue_name)
    return int(queue.message_retention_period) + message.sent_timestamp / 1000 > unix_time()


if hasattr(SQSBackend, "is_message_valid_based_on_retention_period"):
    SQSBackend.is_message_valid_based_on_retention_period = is_message_valid_based_on_retention_period

if hasattr(backends, "list_of_moto_modules"):
    modules = tuple(backends.list_of_moto_modules())
    backends.list_of_moto_modules = lambda: modules


class QuietRequestHandler(WSGIRequestHandler):
    def log_request(self, code="-", size="-"):
        pass


parser = argparse.ArgumentParser()
parser.add_argument("-H", "--host", default="127.0.0.1")
parser.add_argument("-p", "--port", type=int, default=0)
args = parser.parse_args()
app = DomainDispatcherApplication(create_backend_app)
server = make_server(args.host, args.port, app, threaded=True, request_handler=QuietRequestHandler)  # bound and listening on return
os.environ["MOTO_PORT"] = str(server.port)  # moto builds queue URLs from it
print(server.port, flush=True)
devnull = os.open(os.devnull, os.O_WRONLY)
os.dup2(devnull, sys.stdout.fileno())  # nobody reads stdout after the port: never block on it
server.serve_forever()
